-- extend.lua: renew our lease on this master (compare-and-PEXPIRE), restoring it from our shadow.
-- KEYS[1]: lock key    (<prefix>lock:<resource>)
-- KEYS[2]: shadow key  (<prefix>shadow:<resource>)
-- ARGV[1]: lease id    (32 lowercase hex digits)
-- ARGV[2]: ttl in ms   (positive integer)
-- Returns:  1 extended (the lock holds our lease; our shadow, if any, is dropped);
--           2 restored (the lock had expired but our shadow stood: lock re-set from it, shadow dropped);
--           0 absent (neither the lock nor a shadow of ours is here);
--          -1 held by another lease (the lock or the shadow).
local lease_id, ttl = ARGV[1], tonumber(ARGV[2])
if string.len(lease_id) ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
local prefix = lease_id .. '|'
local function ours(value)
  return value and string.sub(value, 1, 33) == prefix
end
local lock = redis.call('GET', KEYS[1])
local shadow = redis.call('GET', KEYS[2])
if lock and not ours(lock) then return -1 end
if shadow and not ours(shadow) then return -1 end
if lock then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if shadow then redis.call('DEL', KEYS[2]) end
  return 1
end
if shadow then
  redis.call('SET', KEYS[1], shadow, 'PX', ARGV[2])
  redis.call('DEL', KEYS[2])
  return 2
end
return 0
