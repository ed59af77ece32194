-- semaphore_release.lua: delete the slots of a semaphore that hold our lease on this master,
-- except the one the lease keeps: the claims an acquisition makes on masters that chose
-- another slot than the one a majority gave it, or every claim of an abandoned acquisition.
-- KEYS: none; the slot keys are built from ARGV[1] (every master is a standalone server).
-- ARGV[1]: slot key base       (<prefix>sem:<resource>:)
-- ARGV[2]: lease id            (32 lowercase hex digits)
-- ARGV[3]: slots to look at    (the semaphore's most slots)
-- ARGV[4]: slot to keep        (-1: none)
-- ARGV[5]: channel             (<prefix>released:<resource>\31s), published to per deleted claim
-- Returns: how many claims were deleted.
local base, lease_id, most, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if #lease_id ~= 32 then
  return redis.error_reply('ERR redlease: lease id must be 32 hex digits')
end
if not most or not keep then
  return redis.error_reply('ERR redlease: slot counts must be integers')
end
local deleted = 0
for slot = 0, most - 1 do
  if slot ~= keep then
    local key = base .. slot
    local held = redis.call('GET', key)
    if held and string.sub(held, 1, 32) == lease_id then
      redis.call('DEL', key)
      deleted = deleted + 1
    end
  end
end
if deleted > 0 then
  redis.call('PUBLISH', ARGV[5], lease_id)
end
return deleted
