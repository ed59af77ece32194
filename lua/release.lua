-- release.lua: delete the lock where it holds our lease (a degraded lease's shadow lives in
-- the lock key too, see shadow.lua) and announce the release. A lease holding several slots
-- of a semaphore names each slot's key.
-- KEYS[1..n]: lock keys (<prefix>lock:<resource>, or the slot keys <prefix>sem:<resource>:<n>)
-- ARGV[1]: lease id    (32 lowercase hex digits)
-- ARGV[2]: channel     (<prefix>released:<resource>), published to only when a lock was deleted
-- Returns: 1 deleted; 0 this master held nothing of ours.
-- Values are always <32-hex lease id>|<owner>, so their first 32 bytes name the lease.
local lease_id = ARGV[1]
if #lease_id ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
local deleted = 0
for _, key in ipairs(KEYS) do
  local current = redis.call('GET', key)
  if current and string.sub(current, 1, 32) == lease_id then
    redis.call('DEL', key)
    deleted = 1
  end
end
if deleted == 1 then
  redis.call('PUBLISH', ARGV[2], lease_id)
end
return deleted
