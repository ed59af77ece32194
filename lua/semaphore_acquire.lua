-- semaphore_acquire.lua: take one free slot of a counting semaphore on this master. A
-- semaphore of limit N is N exclusive locks, its slots; a permit is one slot held by a lease,
-- so at most N valid permits exist whatever the masters disagree on: each slot has at most
-- one holder on a majority, as an exclusive lock does.
-- KEYS[1]: fence counter        (<prefix>fence)
-- ARGV[1]: slot key base        (<prefix>sem:<resource>:, a slot's number follows it)
-- ARGV[2]: value                (<32-hex lease id>|<owner>)
-- ARGV[3]: ttl in ms            (positive integer)
-- ARGV[4]: limit N              (1 to ARGV[5])
-- ARGV[5]: most slots any limit may have (every one is read, to find holders of another limit)
-- ARGV[6..]: the slots to try, in order (each below N; every master gets the same order)
-- Slot values are <lease id>|<owner>\31<limit>: the limit their holder asked for.
-- Returns: {slot, counter}        the slot is ours; the counter after INCR;
--          {-1, least PTTL}      every slot offered is held (PTTL of the one expiring first);
--          {-2, limit in force}  a holder here uses another limit: refused, nothing written.
local base, value, limit, most = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl = tonumber(ARGV[3])
if #value < 34 or string.sub(value, 33, 33) ~= '|' then
  return redis.error_reply('ERR redlease: value must be <lease id>|<owner>')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
if not most or not limit or limit < 1 or limit > most or limit ~= math.floor(limit) then
  return redis.error_reply('ERR redlease: limit must be an integer from 1 to the maximum')
end
for i = 6, #ARGV do
  local slot = tonumber(ARGV[i])
  if not slot or slot < 0 or slot >= limit or slot ~= math.floor(slot) then
    return redis.error_reply('ERR redlease: slots must be integers below the limit')
  end
end
for slot = 0, most - 1 do
  local held = redis.call('GET', base .. slot)
  if held then
    local theirs = tonumber(string.match(held, '\31(%d+)$'))
    if theirs and theirs ~= limit then
      return {-2, theirs}
    end
  end
end
local soonest = -1
for i = 6, #ARGV do
  local key = base .. ARGV[i]
  if redis.call('SET', key, value .. '\31' .. ARGV[4], 'NX', 'PX', ARGV[3]) then
    return {tonumber(ARGV[i]), redis.call('INCR', KEYS[1])}
  end
  local left = redis.call('PTTL', key)
  if left >= 0 and (soonest < 0 or left < soonest) then
    soonest = left
  end
end
return {-1, soonest}
