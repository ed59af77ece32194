-- fair_acquire.lua: take a lock for the waiter at the head of its queue on this master.
-- Waiters whose heartbeat deadline has passed are purged first; the lock is written only when
-- it is free and the waiter is the head (the lowest ticket, then the lowest id). The waiter
-- stays queued: a grant a quorum does not confirm is given back and the waiter keeps its
-- place everywhere; it leaves the queue (fair_leave.lua) once it stops waiting, granted or
-- not, and meanwhile the lock it holds keeps the others out. A waiter that is not queued here
-- (purged, or this master missed its enqueue) is refused: its heartbeat puts it back, or
-- tells it it was purged.
-- KEYS[1]: lock key  (<prefix>lock:<resource>)
-- KEYS[2]: fence     (<prefix>fence)
-- KEYS[3]: queue     (<prefix>queue:<resource>)
-- KEYS[4]: beats     (<prefix>beats:<resource>)
-- ARGV[1]: value     (<32-hex lease id>|<owner>)
-- ARGV[2]: ttl in ms (positive integer)
-- ARGV[3]: waiter id (32 lowercase hex digits)
-- Returns: {0, counter}  granted: the counter after INCR;
--          {-1, PTTL}    refused: the lock is held (its PTTL) or another waiter is ahead (-1).
local value, ttl, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if #value < 34 or string.sub(value, 33, 33) ~= '|' or #waiter ~= 32 then
  return redis.error_reply('ERR redlease: value must be <lease id>|<owner>, with a waiter id')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, gone in ipairs(dead) do
  redis.call('ZREM', KEYS[3], gone)
  redis.call('ZREM', KEYS[4], gone)
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if head ~= waiter then
  return {-1, -1}
end
if not redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return {-1, redis.call('PTTL', KEYS[1])}
end
return {0, redis.call('INCR', KEYS[2])}
