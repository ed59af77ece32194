-- quarantine.lua: record a master's quarantine for every process, at one instant: the record
-- (expiring at the quarantine's end, on this server's clock) and the marker saying so.
-- KEYS[1]: quarantine record  (<prefix>quarantined)
-- KEYS[2]: fleet marker       (<prefix>fleet)
-- ARGV[1]: run_id             (the server process quarantined)
-- ARGV[2]: what is left       (milliseconds, positive integer)
-- ARGV[3]: the marker         (fleet=<id> quarantine_ms=<n> quarantined=<run_id>)
-- Returns: 1. A longer record of the same process already there is kept.
local left = tonumber(ARGV[2])
if not left or left < 1 or not string.match(ARGV[2], '^%d+$') then
  return redis.error_reply('ERR redlease: the quarantine left must be a positive integer')
end
local recorded = redis.call('GET', KEYS[1])
if not (recorded == ARGV[1] and redis.call('PTTL', KEYS[1]) >= left) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
redis.call('SET', KEYS[2], ARGV[3])
return 1
