-- mark.lua: end a preparation: raise the fence counter and write the marker, only if the
-- master is still as the preparation read it (a FLUSHALL, a reload of an older dump or a
-- quarantine begun elsewhere in between would otherwise be forgotten).
-- KEYS[1]: fleet marker       (<prefix>fleet)
-- KEYS[2]: fence counter      (<prefix>fence)
-- KEYS[3]: quarantine record  (<prefix>quarantined)
-- ARGV[1]: the marker read    ('' when there was none)
-- ARGV[2]: the counter read   (non-negative integer: the counter must still hold at least this)
-- ARGV[3]: target             (non-negative integer: the counter is max-assigned this)
-- ARGV[4]: the new marker
-- Returns: the counter after the raise (>= 1); -1 the marker or counter changed since it was
--          read; -2 a quarantine is recorded (nothing written in either case).
local least, target = tonumber(ARGV[2]), tonumber(ARGV[3])
if not least or not target or not string.match(ARGV[2], '^%d+$') or not string.match(ARGV[3], '^%d+$') then
  return redis.error_reply('ERR redlease: counters must be non-negative integers')
end
local marker = redis.call('GET', KEYS[1]) or ''
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if marker ~= ARGV[1] or current < least then
  return -1
end
if redis.call('PTTL', KEYS[3]) > 0 then
  return -2
end
if current < target then
  redis.call('SET', KEYS[2], ARGV[3])
  current = target
end
redis.call('SET', KEYS[1], ARGV[4])
return current
