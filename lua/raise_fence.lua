-- raise_fence.lua: max-assign this master's fence counter, so a majority holds >= the token.
-- KEYS[1]: fence counter (<prefix>fence)
-- ARGV[1]: target        (non-negative integer, decimal string)
-- Returns: the counter after the raise (>= target).
local target = tonumber(ARGV[1])
if not target or target < 0 or target ~= math.floor(target) or not string.match(ARGV[1], '^%d+$') then
  return redis.error_reply('ERR redlease: fence target must be a non-negative integer')
end
local current = redis.call('GET', KEYS[1])
if current and tonumber(current) >= target then
  return tonumber(current)
end
redis.call('SET', KEYS[1], ARGV[1])
return target
