-- heartbeat.lua - this instance is alive for ARGV[3] ms more; forget
-- instances whose time ran out (ARGV[3] = 0: this one leaves).
-- KEYS: 1 rd:instances
-- ARGV: 1 now (unused: leases are real time), 2 holder, 3 time to live
-- Returns {live instances, Redis time in ms, ms until another instance's
-- heartbeat runs out (-1: none)}, so a survivor can look again right then.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', n2s(now))
if tonumber(ARGV[3]) > 0 then
	redis.call('ZADD', KEYS[1], n2s(now + tonumber(ARGV[3])), ARGV[2])
else
	redis.call('ZREM', KEYS[1], ARGV[2])
end
local first = redis.call('ZRANGE', KEYS[1], '0', '1', 'WITHSCORES')
local other = -1
for i = 1, #first, 2 do
	if first[i] ~= ARGV[2] and other < 0 then
		other = tonumber(first[i + 1]) - now
	end
end
return {redis.call('ZCARD', KEYS[1]), n2s(now), n2s(other)}
