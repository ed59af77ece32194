-- birth.lua: make a master with no history a member of a newborn fleet, or nothing.
-- KEYS[1]: fleet marker       (<prefix>fleet)
-- KEYS[2]: fence counter      (<prefix>fence)
-- KEYS[3]: quarantine record  (<prefix>quarantined)
-- ARGV[1]: the marker         (fleet=<id> quarantine_ms=<n> member=<run_id>)
-- Returns: 1 born (the fence counter is 1, the marker set); 0 the master has history (any of
--          the three keys), and nothing was written.
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then
  return 0
end
redis.call('SET', KEYS[2], '1')
redis.call('SET', KEYS[1], ARGV[1])
return 1
