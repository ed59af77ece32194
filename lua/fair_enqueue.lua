-- fair_enqueue.lua: put a waiter in a lock's queue on this master, or refresh its heartbeat.
-- The queue orders waiters by their ticket (allocated like a fencing token, so every master
-- has the same order); the beats hold each waiter's heartbeat deadline on this master's clock.
-- Both keys live as long as the latest deadline.
-- KEYS[1]: queue     (<prefix>queue:<lock>, a sorted set: waiter id → ticket)
-- KEYS[2]: beats     (<prefix>beats:<lock>, a sorted set: waiter id → deadline in ms)
-- ARGV[1]: waiter id (32 lowercase hex digits)
-- ARGV[2]: ticket    (positive integer)
-- ARGV[3]: heartbeat TTL in ms (positive integer)
-- ARGV[4]: 'enqueue' (add the waiter) or 'beat' (refresh it only if it is still queued)
-- Returns: 1 the waiter is queued here (its deadline refreshed); 0 (a beat) it is not: purged
--          as dead, or never queued here.
local ticket, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
if #ARGV[1] ~= 32 or not ticket or ticket < 1 or not ttl or ttl < 1 then
  return redis.error_reply('ERR redlease: waiter id, ticket and heartbeat TTL are needed')
end
if ARGV[4] == 'beat' and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return 1
