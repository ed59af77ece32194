-- rw_release.lua: delete what one lease claimed of a read-write lock on this master, except
-- the key it keeps: the reader slots a read took on masters that chose another slot than the
-- quorum's, and every claim of an abandoned acquisition; and a writer's intent whose wait
-- ended (sent with the wait's id as the lease id).
-- KEYS: none; the keys are built from ARGV[1] (every master is a standalone server).
-- ARGV[1]: key base          (<prefix>rw:<resource>:)
-- ARGV[2]: lease id          (32 lowercase hex digits)
-- ARGV[3]: most reader slots
-- ARGV[4]: key to keep       ('w', 'r<n>', or '' for none)
-- ARGV[5]: channel           (<prefix>released:<resource>\31rw), published to when a lock key
--                            or the intent was deleted (readers it kept out may try again)
-- Returns: how many lock keys were deleted (the intent is not counted).
local base, lease_id, most, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if #lease_id ~= 32 or not most then
  return redis.error_reply('ERR redlease: a lease id and the most reader slots are needed')
end
local deleted = 0
local function drop(suffix)
  if suffix == keep then
    return
  end
  local held = redis.call('GET', base .. suffix)
  if held and string.sub(held, 1, 32) == lease_id then
    redis.call('DEL', base .. suffix)
    deleted = deleted + 1
  end
end
drop('w')
for slot = 0, most - 1 do
  drop('r' .. slot)
end
local withdrawn = false
if redis.call('GET', base .. 'wi') == lease_id then
  redis.call('DEL', base .. 'wi')
  withdrawn = true
end
if deleted > 0 or withdrawn then
  redis.call('PUBLISH', ARGV[5], lease_id)
end
return deleted
