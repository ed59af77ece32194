-- acknowledge.lua: the holder of a revoked lease was told (its sidecar marked the lease lost,
-- or `lock run` stopped its command): delete the lease's tombstone and publish the release, so
-- waiters wake. Anything else the lock holds is left alone.
-- KEYS[1..n]: lock keys     (<prefix>lock:<resource>; each slot's key for a lease of several)
-- ARGV[1]: lease id         (32 hex digits)
-- ARGV[2]: released channel (<prefix>released:<resource>)
-- Returns 1 when a tombstone was deleted, 0 when none was there.
local deleted = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == 'revoked:' .. ARGV[1] then
    redis.call('DEL', key)
    deleted = 1
  end
end
if deleted == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return deleted
