-- semaphore_acquire.lua: take free slots of a counting semaphore on this master, all the
-- permits a lease asks for or none. A semaphore of limit N is N exclusive locks, its slots; a
-- permit is one slot held by a lease, so at most N valid permits exist whatever the masters
-- disagree on: each slot has at most one holder on a majority, as an exclusive lock does.
-- KEYS[1]: fence counter        (<prefix>fence)
-- ARGV[1]: slot key base        (<prefix>sem:<resource>:, a slot's number follows it)
-- ARGV[2]: value                (<32-hex lease id>|<owner>)
-- ARGV[3]: ttl in ms            (positive integer)
-- ARGV[4]: limit N              (1 to ARGV[5])
-- ARGV[5]: most slots any limit may have (every one is read, to find holders of another limit)
-- ARGV[6]: permits k            (1 to N: how many slots the lease takes)
-- ARGV[7..]: the slots to try, in order (each below N; every master gets the same order)
-- Slot values are <lease id>|<owner>\31<limit>: the limit their holder asked for.
-- Returns: {slot 1, counter, slot 2, ..., slot k}  the k first free slots of the order are ours
--                                             (one INCR of the counter for all of them);
--          {-1, least PTTL}   fewer than k slots offered are free: nothing written (PTTL of
--                             the held one expiring first);
--          {-2, limit in force}  a holder here uses another limit: refused, nothing written.
local base, value, limit, most = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl, permits = tonumber(ARGV[3]), tonumber(ARGV[6])
if #value < 34 or string.sub(value, 33, 33) ~= '|' then
  return redis.error_reply('ERR redlease: value must be <lease id>|<owner>')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR redlease: ttl must be a positive integer')
end
if not most or not limit or limit < 1 or limit > most or limit ~= math.floor(limit) then
  return redis.error_reply('ERR redlease: limit must be an integer from 1 to the maximum')
end
if not permits or permits < 1 or permits > limit or permits ~= math.floor(permits) then
  return redis.error_reply('ERR redlease: permits must be an integer from 1 to the limit')
end
for i = 7, #ARGV do
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
local soonest, free = -1, {}
for i = 7, #ARGV do
  local key = base .. ARGV[i]
  local left = redis.call('PTTL', key)
  if left == -2 then
    free[#free + 1] = ARGV[i]
    if #free == permits then
      break
    end
  elseif left >= 0 and (soonest < 0 or left < soonest) then
    soonest = left
  end
end
if #free < permits then
  return {-1, soonest}
end
local held = value .. '\31' .. ARGV[4]
for _, slot in ipairs(free) do
  redis.call('SET', base .. slot, held, 'PX', ARGV[3])
end
local reply = {tonumber(free[1]), redis.call('INCR', KEYS[1])}
for i = 2, #free do
  reply[i + 1] = tonumber(free[i])
end
return reply
