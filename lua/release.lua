-- release.lua: delete the lock and the shadow where they hold our lease; announce the release.
-- KEYS[1]: lock key    (<prefix>lock:<resource>)
-- KEYS[2]: shadow key  (<prefix>shadow:<resource>)
-- ARGV[1]: lease id    (32 lowercase hex digits)
-- ARGV[2]: channel     (<prefix>released:<resource>), published to only when something was deleted
-- Returns: number of keys deleted (0, 1 or 2); 0 means this master held nothing of ours.
-- Values are always <32-hex lease id>|<owner>, so their first 32 bytes name the lease.
local lease_id = ARGV[1]
if #lease_id ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
local deleted = 0
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 32) == lease_id then
  deleted = redis.call('DEL', KEYS[1])
end
current = redis.call('GET', KEYS[2])
if current and string.sub(current, 1, 32) == lease_id then
  deleted = deleted + redis.call('DEL', KEYS[2])
end
if deleted > 0 then
  redis.call('PUBLISH', ARGV[2], lease_id)
end
return deleted
