-- lease.lua - renew (ARGV[3] > 0) or release (ARGV[3] = 0) a lease this
-- instance holds: a shard lease rd:lease:N or a node lease rd:node:N.
-- KEYS: 1 the lease
-- ARGV: 1 now (unused), 2 holder, 3 time to live (ms)
-- Returns 1 when it was ours, else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
	return 0
end
if tonumber(ARGV[3]) > 0 then
	redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
	redis.call('DEL', KEYS[1])
end
return 1
