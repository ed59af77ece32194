-- acquire.lua: take the lock on this master unless another lease holds it or its shadow.
-- KEYS[1]: lock key      (<prefix>lock:<resource>)
-- KEYS[2]: shadow key    (<prefix>shadow:<resource>)
-- KEYS[3]: fence counter (<prefix>fence, one per master, no TTL)
-- ARGV[1]: lease id      (32 lowercase hex digits; every compare is on it)
-- ARGV[2]: lease value   (<lease id>|<owner>; stored in the lock key)
-- ARGV[3]: ttl in ms     (positive integer)
-- Returns: the fence counter after INCR (>= 1) when granted;
--          -(remaining ms of the holder), or 0 when it has no expiry, when refused.
local lease_id, value, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if string.len(lease_id) ~= 32 or string.sub(value, 1, 33) ~= lease_id .. '|' then
  return redis.error_reply('ERR redlease: lease value must start with its lease id')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
local prefix = lease_id .. '|'
local function held_by_other(key)
  local current = redis.call('GET', key)
  return current and string.sub(current, 1, 33) ~= prefix
end
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  if held_by_other(key) then
    local remaining = redis.call('PTTL', key)
    if remaining < 0 then remaining = 0 end
    return -remaining
  end
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return redis.call('INCR', KEYS[3])
