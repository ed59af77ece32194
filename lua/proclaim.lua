-- proclaim.lua: write an election leader's value over its lock key where the key still holds
-- the leader's lease (compare-the-lease, then SET … KEEPTTL), and announce it. A campaign runs
-- it once its term is known (the key holds <lease id>|<owner> until then); a proclamation runs
-- it again with a new value and the same term. The TTL is left as it is: renewals (extend.lua)
-- keep the value, and a release (release.lua) deletes it, as for any lease.
-- KEYS[1]: lock key   (<prefix>elect:<resource>)
-- ARGV[1]: lease id   (32 lowercase hex digits)
-- ARGV[2]: new value  (<lease id>|<owner>\31<term>\31<value>: it starts with the lease id)
-- ARGV[3]: channel    (<prefix>released:<resource>\31e), published to when the value was written
-- Returns: 1 written; 0 nothing here (expired, or never set); -1 another lease (or a force
--          release's tombstone) holds the key: nothing written.
local lease_id, value = ARGV[1], ARGV[2]
if #lease_id ~= 32 or string.sub(value, 1, 33) ~= lease_id .. '|' then
  return redis.error_reply('ERR redlease: the value must start with its lease id')
end
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if string.sub(current, 1, 33) ~= lease_id .. '|' then
  return -1
end
redis.call('SET', KEYS[1], value, 'KEEPTTL')
redis.call('PUBLISH', ARGV[3], lease_id)
return 1
