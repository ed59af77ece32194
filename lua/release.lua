-- release.lua: delete the lock where it holds our lease (a degraded lease's shadow lives in
-- the lock key too, see shadow.lua) and announce the release.
-- KEYS[1]: lock key    (<prefix>lock:<resource>)
-- ARGV[1]: lease id    (32 lowercase hex digits)
-- ARGV[2]: channel     (<prefix>released:<resource>), published to only when the lock was deleted
-- Returns: 1 deleted; 0 this master held nothing of ours.
-- Values are always <32-hex lease id>|<owner>, so their first 32 bytes name the lease.
local lease_id = ARGV[1]
if #lease_id ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 32) == lease_id then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], lease_id)
  return 1
end
return 0
