-- shadow.lua: degraded-mode reservation; set our shadow where the lock is ours or free.
-- KEYS[1]: lock key        (<prefix>lock:<resource>)
-- KEYS[2]: shadow key      (<prefix>shadow:<resource>)
-- ARGV[1]: lease id        (32 lowercase hex digits)
-- ARGV[2]: lease value     (<lease id>|<owner>)
-- ARGV[3]: shadow ttl ms   (positive integer)
-- Returns: 1 shadow set (or refreshed); 0 refused (the lock or the shadow holds another lease).
local lease_id, value, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if string.len(lease_id) ~= 32 or string.sub(value, 1, 33) ~= lease_id .. '|' then
  return redis.error_reply('ERR redlease: lease value must start with its lease id')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
local prefix = lease_id .. '|'
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  local current = redis.call('GET', key)
  if current and string.sub(current, 1, 33) ~= prefix then return 0 end
end
redis.call('SET', KEYS[2], value, 'PX', ARGV[3])
return 1
