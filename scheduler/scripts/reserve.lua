-- reserve.lua - take the best ready jobs of a topic (higher priority, then
-- earlier due) into flight, each with a fencing token and a deadline.
-- KEYS: 1 pool, 2 ready of the topic, 3 ready topics, 4 in flight, 5 counts
-- ARGV: 1 now, 2 topic, 3 count, 4 token base (18 characters),
--       5 time to run (ms), 6 "1": a job's own time to run wins,
--       7 tag "TENANT:SHARD"
-- Returns {n, deadline of the first, id key, record, ...}.  Publishes the
-- earliest new deadline when it is the shard's earliest, so the owner's
-- timer expires it on time.
local now = now_ms()
local topic, n, base = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local ttr, own = tonumber(ARGV[5]), ARGV[6] == '1'
local popped = redis.call('ZPOPMIN', KEYS[2], n)
local out = {0, 0}
local got, first = 0, nil
for i = 1, #popped, 2 do
	local idk = popped[i]
	local rec = redis.call('HGET', KEYS[1], idk)
	if rec then
		local j = dec(rec)
		local t = ttr
		if own and j.ttr and j.ttr > 0 then
			t = j.ttr
		end
		got = got + 1
		j.state = S_IN_FLIGHT
		j.tok = base .. string.format('%04x', got)
		j.dl = now + t
		rec = enc(j)
		redis.call('HSET', KEYS[1], idk, rec)
		redis.call('ZADD', KEYS[4], n2s(j.dl), idk)
		out[#out + 1] = idk
		out[#out + 1] = rec
		if got == 1 then
			out[2] = n2s(j.dl)
		end
		if not first or j.dl < first then
			first = j.dl
		end
	end
end
if redis.call('ZCARD', KEYS[2]) == 0 then
	redis.call('SREM', KEYS[3], topic)
end
if got > 0 then
	count(KEYS[5], topic, S_READY, -got)
	count(KEYS[5], topic, S_IN_FLIGHT, got)
	local f = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
	if tonumber(f[2]) == first then
		redis.call('PUBLISH', 'rd:wake', ARGV[7] .. ':' .. n2s(first) ..
		    ':f')
	end
end
out[1] = got
return out
