-- reserve.lua - take the best ready jobs of a topic (higher priority, then
-- earlier due) into flight, each with a fencing token and a deadline.
-- A record is edited in place (state byte, flag, the token and deadline
-- inserted before the body), never decoded whole, and the pool and the
-- in-flight set are each read or written by one command for the batch.
-- KEYS: 1 pool, 2 ready of the topic, 3 ready topics, 4 in flight, 5 counts
-- ARGV: 1 now, 2 topic, 3 count, 4 token base (18 characters),
--       5 time to run (ms), 6 "1": a job's own time to run wins,
--       7 tag "TENANT:SHARD", 8 (optional) heads: how many of the ready
--       set's next jobs to answer with, after the ones taken
-- Returns {n, deadline of the first, id key, record, ...}, then with
-- ARGV[8] > 0 one more element: {id key, score, ...} of the next ready
-- jobs (the caller's view of the shard, so its next reserve need not read
-- it again).  Publishes the earliest new deadline when it is the shard's
-- earliest, so the owner's timer expires it on time.
local now = now_ms()
local topic, base = ARGV[2], ARGV[4]
local ttr, own = tonumber(ARGV[5]), ARGV[6] == '1'
local popped = redis.call('ZPOPMIN', KEYS[2], ARGV[3])
local out = {0, 0}
local got, first, ldl, sdl = 0, nil, nil, nil
if #popped > 0 then
	local ids = {}
	for i = 1, #popped, 2 do
		ids[#ids + 1] = popped[i]
	end
	local recs = redis.call('HMGET', KEYS[1], unpack(ids))
	local hset, zadd = {}, {}
	for i = 1, #ids do
		local rec = recs[i]
		if rec then
			local p, jttr = tail_at(rec)
			local t = ttr
			if own and jttr and jttr > 0 then
				t = jttr
			end
			got = got + 1
			local dl = now + t
			if dl ~= ldl then	-- mostly one deadline per call
				ldl, sdl = dl, n2s(dl)
			end
			local vb = string.byte(rec, 1)
			local flags = string.byte(rec, 2)
			vb = vb - vb % F_VER
			if has(flags, F_RES) then	-- never: ready has none
				rec = string.sub(rec, 1, p - 1) ..
				    string.sub(rec, p + 28)
				flags = flags - F_RES
			end
			rec = string.char(S_IN_FLIGHT + vb, flags + F_RES) ..
			    string.sub(rec, 3, p - 1) ..
			    base .. string.format('%04x', got) ..
			    struct.pack('>I6', dl) .. string.sub(rec, p)
			hset[#hset + 1] = ids[i]
			hset[#hset + 1] = rec
			zadd[#zadd + 1] = sdl
			zadd[#zadd + 1] = ids[i]
			out[#out + 1] = ids[i]
			out[#out + 1] = rec
			if got == 1 then
				out[2] = sdl
			end
			if not first or dl < first then
				first = dl
			end
		end
	end
	if got > 0 then
		redis.call('HSET', KEYS[1], unpack(hset))
		redis.call('ZADD', KEYS[4], unpack(zadd))
	end
end
local heads = nil
if (tonumber(ARGV[8]) or 0) > 0 then
	heads = call_kept({}, 'ZRANGE', KEYS[2], '0', n2s(ARGV[8] - 1),
	    'WITHSCORES')
	if #heads == 0 then
		redis.call('SREM', KEYS[3], topic)
	end
elseif call_kept(0, 'ZCARD', KEYS[2]) == 0 then
	redis.call('SREM', KEYS[3], topic)
end
if got > 0 then
	count(KEYS[5], topic, S_IN_FLIGHT, got)
	count(KEYS[5], topic, S_READY, -got)
	local f = redis.call('ZRANGE', KEYS[4], '0', '0', 'WITHSCORES')
	if tonumber(f[2]) == first then
		redis.call('PUBLISH', 'rd:wake', ARGV[7] .. ':' .. n2s(first) ..
		    ':f')
	end
end
out[1] = got
if heads then
	out[#out + 1] = heads
end
return out
