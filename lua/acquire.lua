-- acquire.lua: take the lock on this master unless any lease holds it or its shadow.
-- KEYS[1]: lock key      (<prefix>lock:<resource>)
-- KEYS[2]: shadow key    (<prefix>shadow:<resource>)
-- KEYS[3]: fence counter (<prefix>fence, one per master, no TTL)
-- ARGV[1]: lease id      (32 lowercase hex digits; fresh for every attempt, so any key that
--                         exists belongs to another lease)
-- ARGV[2]: owner         (the lock key holds <lease id>|<owner>)
-- ARGV[3]: ttl in ms     (positive integer; SET rejects anything else before anything is written)
-- Returns: the fence counter after INCR (>= 1) when granted;
--          -(remaining ms of the holder), or 0 when it has no expiry, when refused.
-- Kept lean on purpose: this runs on every master for every attempt (see bench/).
local lease_id = ARGV[1]
if #lease_id ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], lease_id .. '|' .. ARGV[2], 'PX', ARGV[3])
  return redis.call('INCR', KEYS[3])
end
local remaining = redis.call('PTTL', KEYS[1])
if remaining == -2 then remaining = redis.call('PTTL', KEYS[2]) end
if remaining < 0 then remaining = 0 end
return -remaining
