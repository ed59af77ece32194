-- rw_acquire.lua: take a read-write lock's writer or one of its reader slots on this master.
-- Keys under ARGV[1] (<prefix>rw:<resource>:): `w` the writer, `r<n>` reader slot n, `wi` a
-- waiting writer's intent. Per master, a writer stands only where no reader stands, and a
-- reader only where no other lease's writer stands: every conflict is between two keys of
-- one master, so two majorities that intersect cannot both hold conflicting leases.
-- Write-preferring: a blocking writer refused because readers stand leaves its intent (the id
-- of its wait, for ARGV[8] ms, set again by each of its attempts), and no new reader is let in
-- beside an intent.
-- KEYS[1]: fence counter         (<prefix>fence)
-- ARGV[1]: key base              (<prefix>rw:<resource>:)
-- ARGV[2]: value                 (<32-hex lease id>|<owner>)
-- ARGV[3]: ttl in ms             (positive integer)
-- ARGV[4]: mode                  ('read' or 'write')
-- ARGV[5]: most reader slots     (every one is read by a writer)
-- ARGV[6]: writer allowed beside (a lease id: a read taken by the writer downgrading; or '')
-- ARGV[7]: intent id             (write: the id of a blocking writer's wait, or '' for none)
-- ARGV[8]: intent ttl in ms      (positive integer: how long an intent outlives its last attempt)
-- ARGV[9..]: reader slots to try, in order (read only; every master gets the same order)
-- Returns: {slot, counter}   ours (a writer answers slot 0); the counter after INCR;
--          {-1, PTTL}       held: another lease's writer (or, for a read, its intent) stands,
--                           or (a write) readers stand, or (a read) every reader slot is held;
--                           the PTTL of the key that refused, -1 when it has none.
local base, value, ttl, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local most, beside, intent_id = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local intent_ttl = tonumber(ARGV[8])
if #value < 34 or string.sub(value, 33, 33) ~= '|' then
  return redis.error_reply('ERR redlease: value must be <lease id>|<owner>')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
if not intent_ttl or intent_ttl < 1 or intent_ttl ~= math.floor(intent_ttl) then
  return redis.error_reply('ERR redlease: intent ttl must be a positive integer')
end
if (mode ~= 'read' and mode ~= 'write') or not most or most < 1 then
  return redis.error_reply('ERR redlease: mode must be read or write, with reader slots')
end
local lease_id = string.sub(value, 1, 32)
local writer = redis.call('GET', base .. 'w')
local writer_id = writer and string.sub(writer, 1, 32)
if writer and writer_id ~= lease_id and writer_id ~= beside then
  -- A writer waiting behind another writer leaves no intent: once that writer is gone, the
  -- readers that waited for it may come in first (and an intent then keeps new ones out), so
  -- neither readers nor writers starve while the other kind keeps coming.
  return {-1, redis.call('PTTL', base .. 'w')}
end
if mode == 'write' then
  local readers, soonest = false, -1
  for slot = 0, most - 1 do
    local reader = redis.call('GET', base .. 'r' .. slot)
    if reader and string.sub(reader, 1, 32) ~= lease_id then
      readers = true
      local left = redis.call('PTTL', base .. 'r' .. slot)
      if left >= 0 and (soonest < 0 or left < soonest) then
        soonest = left
      end
    end
  end
  if readers then
    local intent = redis.call('GET', base .. 'wi')
    if intent_id ~= '' and (not intent or intent == intent_id) then
      redis.call('SET', base .. 'wi', intent_id, 'PX', ARGV[8])
    end
    return {-1, soonest}
  end
  if not redis.call('SET', base .. 'w', value, 'NX', 'PX', ARGV[3]) then
    return {-1, redis.call('PTTL', base .. 'w')}
  end
  if intent_id ~= '' and redis.call('GET', base .. 'wi') == intent_id then
    redis.call('DEL', base .. 'wi')
  end
  return {0, redis.call('INCR', KEYS[1])}
end
local intent = redis.call('GET', base .. 'wi')
if intent and intent ~= beside then
  return {-1, redis.call('PTTL', base .. 'wi')}
end
local soonest = -1
for i = 9, #ARGV do
  local slot = tonumber(ARGV[i])
  if not slot or slot < 0 or slot >= most or slot ~= math.floor(slot) then
    return redis.error_reply('ERR redlease: reader slots must be integers below the most')
  end
  local key = base .. 'r' .. slot
  if redis.call('SET', key, value, 'NX', 'PX', ARGV[3]) then
    return {slot, redis.call('INCR', KEYS[1])}
  end
  local left = redis.call('PTTL', key)
  if left >= 0 and (soonest < 0 or left < soonest) then
    soonest = left
  end
end
return {-1, soonest}
