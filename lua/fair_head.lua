-- fair_head.lua: the head check of a fair waiter's attempt, never run alone: the engine puts
-- it in front of a kind's acquisition script (lock_acquire.lua, semaphore_acquire.lua,
-- rw_acquire.lua) to make
-- that script's fair variant. Waiters whose heartbeat deadline has passed are purged first; a
-- waiter that is not the head of its queue on this master (the lowest ticket, then the lowest
-- id), or not queued here at all, is refused before the kind's script runs; the head goes on
-- to it, and that script alone decides what is granted (so the kind's bound holds as without
-- fairness). The waiter stays queued either way: it leaves (fair_leave.lua) once it stops
-- waiting, granted or not, and the next head is then let try beside what it holds.
-- KEYS[1]: fence counter (<prefix>fence), the kind's script's own KEYS[1]
-- KEYS[2]: queue         (<prefix>queue:<name>, a sorted set: waiter id → ticket)
-- KEYS[3]: beats         (<prefix>beats:<name>, a sorted set: waiter id → deadline in ms)
-- ARGV[1]: waiter id     (32 lowercase hex digits)
-- ARGV[2..]: the kind's script's ARGV, which it reads as its ARGV[1..]
-- Returns: {-1, -1} another waiter is ahead here, or this one is not queued here; otherwise
--          what the kind's script returns.
do
  local waiter = ARGV[1]
  if not waiter or #waiter ~= 32 then
    return redis.error_reply('ERR redlease: a fair attempt needs its waiter id')
  end
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, gone in ipairs(dead) do
    redis.call('ZREM', KEYS[2], gone)
    redis.call('ZREM', KEYS[3], gone)
  end
  if redis.call('ZRANGE', KEYS[2], 0, 0)[1] ~= waiter then
    return {-1, -1}
  end
end
local ARGV = {unpack(ARGV, 2)}
