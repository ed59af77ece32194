-- fair_leave.lua: take a waiter out of a lock's queue on this master (it stopped waiting).
-- KEYS[1]: queue     (<prefix>queue:<resource>)
-- KEYS[2]: beats     (<prefix>beats:<resource>)
-- ARGV[1]: waiter id (32 lowercase hex digits)
-- ARGV[2]: channel   (<prefix>released:<resource>): told, so the next waiter tries at once
-- Returns: 1 it was queued here; 0 it was not.
if #ARGV[1] ~= 32 then
  return redis.error_reply('ERR redlease: waiter id must be 32 hex digits')
end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return removed
