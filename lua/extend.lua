-- extend.lua: renew our leases on this master (compare-and-PEXPIRE), restoring each one from
-- our shadow when its lock expired here. One call renews any number of leases (the sidecar
-- batches the renewals due at the same time into one call per master).
-- KEYS[2i-1]: lock key of lease i    (<prefix>lock:<resource>)
-- KEYS[2i]:   shadow key of lease i  (<prefix>shadow:<resource>)
-- ARGV[2i-1]: lease id of lease i    (32 lowercase hex digits; values start with it)
-- ARGV[2i]:   ttl in ms of lease i   (positive integer)
-- Returns: an array with one code per lease:
--           1 extended (the lock holds our lease; our shadow, if any, is dropped);
--           2 restored (the lock had expired but our shadow stood: lock re-set from it, shadow dropped);
--           0 absent (neither the lock nor a shadow of ours is here);
--          -1 held by another lease (the lock or the shadow).
-- Every argument is checked before anything is written.
local n = #KEYS / 2
if n < 1 or #KEYS % 2 ~= 0 or #ARGV ~= #KEYS then
  return redis.error_reply('ERR redlease: one lock key, shadow key, lease id and ttl per lease')
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
  local lock_key, shadow_key = KEYS[2 * i - 1], KEYS[2 * i]
  local lease_id, ttl = ARGV[2 * i - 1], ARGV[2 * i]
  local lock = redis.call('GET', lock_key)
  local shadow = redis.call('GET', shadow_key)
  if (lock and string.sub(lock, 1, 32) ~= lease_id)
      or (shadow and string.sub(shadow, 1, 32) ~= lease_id) then
    codes[i] = -1
  elseif lock then
    redis.call('PEXPIRE', lock_key, ttl)
    if shadow then redis.call('DEL', shadow_key) end
    codes[i] = 1
  elseif shadow then
    redis.call('SET', lock_key, shadow, 'PX', ttl)
    redis.call('DEL', shadow_key)
    codes[i] = 2
  else
    codes[i] = 0
  end
end
return codes
