-- acknowledge.lua: the holder of a revoked lease was told (its sidecar marked the lease lost,
-- or `lock run` stopped its command): delete the lease's tombstone and publish the release, so
-- waiters wake. Anything else the lock holds is left alone.
-- KEYS[1]: lock key         (<prefix>lock:<resource>)
-- ARGV[1]: lease id         (32 hex digits)
-- ARGV[2]: released channel (<prefix>released:<resource>)
-- Returns 1 when the tombstone was deleted, 0 when it was not there.
if redis.call('GET', KEYS[1]) == 'revoked:' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[1])
  return 1
end
return 0
