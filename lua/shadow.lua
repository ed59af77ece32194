-- shadow.lua: degraded-mode reservation. Where the lock is ours or free, (re)set it to our
-- lease for the shadow TTL, so it outlives the renewals that cannot reach a quorum. The
-- shadow is the lock key itself: every acquisition takes only a free key, so respects it, and
-- the next renewal (extend.lua) sets the lock's own TTL back. A lease holding several slots
-- of a semaphore reserves all of them or none.
-- KEYS[1..n-1]: lock keys  (<prefix>lock:<resource>, or each slot's <prefix>sem:<resource>:<n>)
-- KEYS[n]: revoked key     (<prefix>revoked:<lease id>): set by a force release of this lease,
--          which a shadow must not undo
-- ARGV[1]: lease id        (32 lowercase hex digits)
-- ARGV[2]: lease value     (<lease id>|<owner>)
-- ARGV[3]: shadow ttl ms   (positive integer)
-- Returns: 1 reserved (every lock holds our lease for at least the shadow TTL);
--          0 refused, nothing written (a lock holds another lease, or this lease was
--          force-released).
local lease_id, value, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if string.len(lease_id) ~= 32 or string.sub(value, 1, 33) ~= lease_id .. '|' then
  return redis.error_reply('ERR redlease: lease value must start with its lease id')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
local locks = #KEYS - 1
if locks < 1 then
  return redis.error_reply('ERR redlease: one lock key at least, then the revoked key')
end
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then
  return 0
end
for i = 1, locks do
  local current = redis.call('GET', KEYS[i])
  if current and string.sub(current, 1, 33) ~= lease_id .. '|' then
    return 0
  end
end
for i = 1, locks do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[3])
  else
    -- Ours already: only ever lengthen it (a key without expiry, -1, is left alone).
    local remaining = redis.call('PTTL', KEYS[i])
    if remaining >= 0 and remaining < ttl then
      redis.call('PEXPIRE', KEYS[i], ARGV[3])
    end
  end
end
return 1
