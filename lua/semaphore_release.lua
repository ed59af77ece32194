-- semaphore_release.lua: delete the slots of a semaphore that hold our lease on this master,
-- except those the lease keeps: the claims an acquisition makes on masters that chose other
-- slots than the ones a majority gave it, or every claim of an abandoned acquisition.
-- KEYS: none; the slot keys are built from ARGV[1] (every master is a standalone server).
-- ARGV[1]: slot key base       (<prefix>sem:<resource>:)
-- ARGV[2]: lease id            (32 lowercase hex digits)
-- ARGV[3]: slots to look at    (the semaphore's most slots)
-- ARGV[4]: channel             (<prefix>released:<resource>\31s), published to once when a
--                              claim was deleted
-- ARGV[5..]: slots to keep     (none: delete every claim of the lease)
-- Returns: how many claims were deleted.
local base, lease_id, most = ARGV[1], ARGV[2], tonumber(ARGV[3])
if #lease_id ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
if not most then
  return redis.error_reply('ERR redlease: slot counts must be integers')
end
local keep = {}
for i = 5, #ARGV do
  local slot = tonumber(ARGV[i])
  if not slot then
    return redis.error_reply('ERR redlease: slots to keep must be integers')
  end
  keep[slot] = true
end
local deleted = 0
for slot = 0, most - 1 do
  if not keep[slot] then
    local key = base .. slot
    local held = redis.call('GET', key)
    if held and string.sub(held, 1, 32) == lease_id then
      redis.call('DEL', key)
      deleted = deleted + 1
    end
  end
end
if deleted > 0 then
  redis.call('PUBLISH', ARGV[4], lease_id)
end
return deleted
