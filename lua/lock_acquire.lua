-- lock_acquire.lua: an exclusive lock's acquisition as a script, run only as its fair variant
-- (fair_head.lua goes in front of it: the head of the lock's queue of fair waiters takes the
-- lock when it is free). A plain acquisition sends the same SET NX PX and INCR as commands.
-- It takes a resource's lock or an election's key; the waiter stays queued, as fair_head.lua
-- says, and a grant a quorum does not confirm is given back.
-- KEYS[1]: fence counter (<prefix>fence)
-- ARGV[1]: lock key      (<prefix>lock:<resource>, or <prefix>elect:<resource>)
-- ARGV[2]: value         (<32-hex lease id>|<owner>)
-- ARGV[3]: ttl in ms     (positive integer)
-- Returns: {0, counter}  granted: the counter after INCR;
--          {-1, PTTL}    refused: the lock is held (its PTTL).
local lock, value, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not lock or not value or #value < 34 or string.sub(value, 33, 33) ~= '|' then
  return redis.error_reply('ERR redlease: value must be <lease id>|<owner>, after the lock key')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
if not redis.call('SET', lock, value, 'NX', 'PX', ARGV[3]) then
  return {-1, redis.call('PTTL', lock)}
end
return {0, redis.call('INCR', KEYS[1])}
