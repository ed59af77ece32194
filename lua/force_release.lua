-- force_release.lua: an operator's force release of a lock on this master, whatever lease
-- holds it (or only lease ARGV[5], a compare-and-revoke). The lease is revoked: its value is
-- replaced by the tombstone 'revoked:<lease id>' for the lock's remaining TTL, so nobody else
-- can take the lock until the holder was told (it deletes the tombstone, acknowledge.lua) or
-- the lease's validity ended; `<prefix>revoked:<lease id>` is set so the holder's shadow
-- reservations (shadow.lua) cannot set the lease again; and the lease id is published on the
-- revocations channel, which every sidecar and `lock run` listens to. With ARGV[6] = '1' (the
-- operator says the holder is gone) the lock is deleted at once instead and the release
-- published, so waiters wake. The audit record is written after, by XADD.
-- KEYS[1]: lock key            (<prefix>lock:<resource>)
-- ARGV[1]: released channel    (<prefix>released:<resource>)
-- ARGV[2]: revoked prefix      (<prefix>revoked:), followed by the lease id it names
-- ARGV[3]: revoked ttl ms      (positive integer: longer than any shadow of the lease can run)
-- ARGV[4]: revocations channel (<prefix>revocations)
-- ARGV[5]: the lease id to revoke (32 hex digits), or '' for whatever lease holds the lock
-- ARGV[6]: '1' to delete the lock at once, '0' to leave the tombstone
-- Returns {code, value, pttl}: value is what the lock held (nil when nothing), pttl the
-- tombstone's TTL in ms (-1 when there is none)
--   1 revoked (the tombstone is set)       2 deleted
--   3 already revoked (its tombstone)      0 nothing here
--  -1 another lease holds it (ARGV[5] given): nothing was written
local current = redis.call('GET', KEYS[1])
if not current then
  return {0, false, -1}
end
local expected = ARGV[5]
local outright = ARGV[6] == '1'
local function delete()
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[1], 'forced')
end
if string.sub(current, 1, 8) == 'revoked:' then
  if expected ~= '' and string.sub(current, 9) ~= expected then
    return {-1, current, -1}
  end
  if outright then
    delete()
    return {2, current, -1}
  end
  return {3, current, redis.call('PTTL', KEYS[1])}
end
if string.sub(current, 33, 33) ~= '|' then
  -- Not a value redlease wrote: nobody to tell.
  if expected ~= '' then
    return {-1, current, -1}
  end
  delete()
  return {2, current, -1}
end
local lease_id = string.sub(current, 1, 32)
if expected ~= '' and lease_id ~= expected then
  return {-1, current, -1}
end
redis.call('SET', ARGV[2] .. lease_id, '1', 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], lease_id)
if outright then
  delete()
  return {2, current, -1}
end
redis.call('SET', KEYS[1], 'revoked:' .. lease_id, 'KEEPTTL')
return {1, current, redis.call('PTTL', KEYS[1])}
