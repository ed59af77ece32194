-- inspect.lua: read, at one instant, what a preparation decides a master's standing from.
-- KEYS[1]: fleet marker       (<prefix>fleet)
-- KEYS[2]: fence counter      (<prefix>fence)
-- KEYS[3]: quarantine record  (<prefix>quarantined)
-- Returns: {marker or nil, fence counter or nil, record or nil, the record's PTTL in ms}
--          (the PTTL is -2 when there is no record).
return {
  redis.call('GET', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('GET', KEYS[3]),
  redis.call('PTTL', KEYS[3]),
}
