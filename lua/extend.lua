-- extend.lua: renew our leases on this master (compare-and-PEXPIRE). One call renews any
-- number of leases (the sidecar batches the renewals due at the same time into one call per
-- master). A degraded lease's shadow is its lock key with the shadow TTL (see shadow.lua):
-- renewing it sets the lock's own TTL back, which is how a degraded lease recovers.
-- KEYS[i]:    lock key of lease i    (<prefix>lock:<resource>)
-- ARGV[2i-1]: lease id of lease i    (32 lowercase hex digits; values start with it)
-- ARGV[2i]:   ttl in ms of lease i   (positive integer)
-- Returns: an array with one code per lease:
--           1 extended (the lock holds our lease);
--           0 absent (nothing of ours is here: it expired or was force-released);
--          -1 held by another lease;
--          -2 revoked: a force release left the lease's tombstone here (force_release.lua).
-- Every argument is checked before anything is written.
local n = #KEYS
if n < 1 or #ARGV ~= 2 * n then
  return redis.error_reply('ERR redlease: one lock key, lease id and ttl per lease')
end
for i = 1, n do
  local ttl = tonumber(ARGV[2 * i])
  if #ARGV[2 * i - 1] ~= 32 then
    return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
  end
  if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
    return redis.error_reply('ERR redlease: ttl must be a positive integer')
  end
end
local codes = {}
for i = 1, n do
  local lease_id = ARGV[2 * i - 1]
  local lock = redis.call('GET', KEYS[i])
  if not lock then
    codes[i] = 0
  elseif lock == 'revoked:' .. lease_id then
    codes[i] = -2
  elseif string.sub(lock, 1, 32) ~= lease_id then
    codes[i] = -1
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    codes[i] = 1
  end
end
return codes
