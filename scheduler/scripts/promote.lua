-- promote.lua - move due jobs of one topic of one shard to its ready set:
-- at most ARGV[3] per call, so a burst is promoted by many short calls.
-- Only the state byte of each record changes, so records are not decoded
-- whole, and the pool, the ready set and the delays are each written by
-- one command for the whole batch.  rd:ready is published when the topic's
-- ready set of this shard was empty (only then can consumers be waiting).
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 ready of the topic,
--       5 ready topics, 6 counts
-- ARGV: 1 now, 2 topic, 3 batch, 4 tag "TENANT:SHARD"
-- A call moves at most PROMOTE_BYTES of records (at least one job),
-- judged by the size of its first: each record is read and written whole
-- to change its state byte, and a timer pass sends every slot's promote
-- in one pipeline, so a burst of large bodies would hold up the pass, and
-- with it every other tenant's due jobs, for as long as its bytes take.
-- Returns {moved, more (1: more are due now), shard head (-1: none),
-- id key, from state .. short record (state, priority, attempts, due,
-- topic; no body), ...} for the jobs moved.  Never moves a job whose due
-- time is after now.
local PROMOTE_BYTES = 262144
local now = now_ms()
local topic, batch, tag = ARGV[2], ARGV[3], ARGV[4]
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', n2s(now),
    'LIMIT', '0', batch)
if #ids > 1 then
	local fit = math.floor(PROMOTE_BYTES /
	    math.max(redis.call('HSTRLEN', KEYS[1], ids[1]), 1))
	if fit < #ids then
		local keep = {}
		for i = 1, math.max(fit, 1) do
			keep[i] = ids[i]
		end
		ids = keep
	end
end
local out = {0, 0, -1}
local moved, nsched, nretry = 0, 0, 0
if #ids > 0 then
	local recs = redis.call('HMGET', KEYS[1], unpack(ids))
	local hset, zadd = {}, {}
	for i = 1, #ids do
		local rec = recs[i]
		if rec then
			local st, flags, due, tl = struct.unpack('>BBI6B', rec)
			local vb = st - st % F_VER
			st = st - vb
			local p, pri = 10 + tl, 0
			local short = bit.band(flags, F_PRI + F_ATT)
			local n = 0
			if has(flags, F_PRI) then
				pri = struct.unpack('>i2', rec, p)
				n = 2
			end
			if has(flags, F_ATT) then
				n = n + 2
			end
			if st == S_SCHEDULED then
				nsched = nsched + 1
			else
				nretry = nretry + 1
			end
			hset[#hset + 1] = ids[i]
			hset[#hset + 1] = string.char(S_READY + vb) ..
			    string.sub(rec, 2)
			zadd[#zadd + 1] = n2s((1023 - pri) * PRI_SPAN + due)
			zadd[#zadd + 1] = ids[i]
			moved = moved + 1
			out[#out + 1] = ids[i]
			out[#out + 1] = string.char(st, S_READY, short) ..
			    string.sub(rec, 3, p - 1 + n)
		end
	end
	redis.call('ZREM', KEYS[2], unpack(ids))
	fix_head(KEYS[2], KEYS[3], topic)
	if moved > 0 then
		local was = redis.call('EXISTS', KEYS[4])
		redis.call('HSET', KEYS[1], unpack(hset))
		redis.call('ZADD', KEYS[4], unpack(zadd))
		count(KEYS[6], topic, S_READY, moved)
		count(KEYS[6], topic, S_SCHEDULED, -nsched)
		count(KEYS[6], topic, S_RETRYING, -nretry)
		redis.call('SADD', KEYS[5], topic)
		-- Consumers wait only when nothing was ready: tell them then.
		if was == 0 then
			redis.call('PUBLISH', 'rd:ready', tag .. ':' .. topic)
		end
	end
end
out[1] = moved
local nx = call_kept({}, 'ZRANGE', KEYS[2], '0', '0', 'WITHSCORES')
if #nx > 0 and tonumber(nx[2]) <= now then
	out[2] = 1
end
out[3] = n2s(shard_head(KEYS[3]))
return out
