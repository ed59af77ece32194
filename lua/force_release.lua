-- force_release.lua: delete the lock whatever lease holds it (an operator's force release),
-- mark that lease revoked so its holder's shadow reservations (shadow.lua) cannot set it again,
-- and announce the release, so waiters wake. The audit record is written after, by XADD, once
-- every master's answer is known.
-- KEYS[1]: lock key        (<prefix>lock:<resource>)
-- ARGV[1]: channel         (<prefix>released:<resource>), published to only when the lock was deleted
-- ARGV[2]: revoked prefix  (<prefix>revoked:), followed by the lease id it names
-- ARGV[3]: revoked ttl ms  (positive integer: longer than any shadow of the lease can run)
-- Returns: the value the lock held (<32-hex lease id>|<owner>), or nil when there was none.
local current = redis.call('GET', KEYS[1])
if current then
  redis.call('DEL', KEYS[1])
  local lease_id = string.sub(current, 1, 32)
  if string.sub(current, 33, 33) == '|' then
    redis.call('SET', ARGV[2] .. lease_id, '1', 'PX', ARGV[3])
  end
  redis.call('PUBLISH', ARGV[1], lease_id)
end
return current
