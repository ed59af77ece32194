-- ticket.lua: draw a queue ticket from this master's fence counter (a fair waiter's place:
-- the largest counter a majority answered, as a fencing token is).
-- KEYS[1]: fence counter (<prefix>fence)
-- Returns: the counter after INCR.
return redis.call('INCR', KEYS[1])
