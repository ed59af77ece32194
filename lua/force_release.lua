-- force_release.lua: delete the lock whatever lease holds it (an operator's force release) and
-- announce the release, so waiters wake. The audit record is written after, by XADD, once every
-- master's answer is known.
-- KEYS[1]: lock key    (<prefix>lock:<resource>)
-- ARGV[1]: channel     (<prefix>released:<resource>), published to only when the lock was deleted
-- Returns: the value the lock held (<32-hex lease id>|<owner>), or nil when there was none.
local current = redis.call('GET', KEYS[1])
if current then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[1], string.sub(current, 1, 32))
end
return current
