-- finish.lua - apply the outcomes of attempts to jobs in flight of one
-- topic of one shard: done, retry at a time, dead, or release (back to
-- ready, no attempt counted).  Fenced: refused unless the token is the
-- current reservation's, so a late ack cannot finish a job that was
-- redelivered, and an expiry and an ack racing for one reservation apply
-- exactly once.  Several jobs per call (the reporter's batches): the pool,
-- the attempt logs and the sets are each read or written by one command for
-- the call and the counts once, and each record is edited in place (state,
-- flags, attempts, due time, version; the reservation cut out) instead of
-- being decoded and encoded whole with its body.  Every outcome takes the
-- job's next version (lib.lua, next_ver), a release too.
-- KEYS: 1 pool, 2 in flight, 3 delays of the topic, 4 heads, 5 dead of the
--       topic, 6 finished, 7 counts, 8 bizkeys, 9 attempt logs,
--       10 ready of the topic, 11 ready topics
-- ARGV: 1 now, 2 topic, 3 tag, then per job 6: id key, token, verdict
--       (done retry dead release), next attempt (retry), packed attempt or
--       "", "1": only if the deadline has passed (expiry)
-- Returns per job, in order, three elements: {0, new state, new version},
-- {-2, 0, 0} no such job, {-3, 0, 0} not of that topic, {-4, state, 0}
-- stale token, {-5, 0, 0} deadline not reached.
local now = now_ms()
local snow = n2s(now)
local topic, tag = ARGV[2], ARGV[3]
local n = (#ARGV - 3) / 6
local ids, logged = {}, {}
for k = 1, n do
	ids[k] = ARGV[3 + (k - 1) * 6 + 1]
end
local recs = redis.call('HMGET', KEYS[1], unpack(ids))
local out, seen = {}, {}
local hset, fdel, zdone, zdead, zdelay, zready = {}, {}, {}, {}, {}, {}
local logs, lids = {}, {}
local cnt = {0, 0, 0, 0, 0, 0, 0}	-- count deltas by state + 1
local first_retry = nil
local function res(code, st, ver)
	out[#out + 1] = code
	out[#out + 1] = st
	out[#out + 1] = ver
end
for k = 1, n do
	local b = 3 + (k - 1) * 6
	local idk, token, verdict = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
	local rec = seen[idk] or recs[k]
	if not rec then
		res(-2, 0, 0)
	else
		local st, flags, due, tl = struct.unpack('>BBI6B', rec)
		local p, _, attp, verp = tail_at(rec)
		st = st % F_VER
		local dl = nil
		if ARGV[b + 6] == '1' then
			dl = redis.call('ZSCORE', KEYS[2], idk)
		end
		if string.sub(rec, 10, 9 + tl) ~= topic then
			res(-3, 0, 0)
		elseif st ~= S_IN_FLIGHT or not has(flags, F_RES) or
		    string.sub(rec, p, p + 21) ~= token then
			res(-4, st, 0)
		elseif dl and tonumber(dl) > now then
			res(-5, 0, 0)
		else
			local att, to = 0, S_READY
			if attp then
				att = struct.unpack('>I2', rec, attp)
			end
			if verdict ~= 'release' then
				att = att + 1
			end
			if verdict == 'done' then
				to = S_DELIVERED
			elseif verdict == 'retry' then
				to = S_RETRYING
				due = tonumber(ARGV[b + 4])
			elseif verdict == 'dead' then
				to = S_DEAD
			end
			-- The new record: head fields, attempts, rest, version,
			-- body.
			local ver = 0
			if verp then
				ver = struct.unpack('>I6', rec, verp)
			end
			ver = next_ver(ver)
			local a = ''
			if att ~= 0 then
				a = struct.pack('>I2', math.min(att, 65535))
			end
			local ap = attp
			if not ap then
				ap = 10 + tl
				if has(flags, F_PRI) then ap = ap + 2 end
			end
			local rest = attp and attp + 2 or ap
			flags = flags - F_RES
			if a ~= '' then
				flags = bit.bor(flags, F_ATT)
			end
			local head = string.char(to + F_VER, flags) ..
			    struct.pack('>I6', due) .. string.sub(rec, 9, ap - 1) ..
			    a .. string.sub(rec, rest, (verp or p) - 1) ..
			    struct.pack('>I6', ver)
			local nrec = head .. string.sub(rec, p + 28)
			seen[idk] = nrec
			hset[#hset + 1] = idk
			hset[#hset + 1] = nrec
			fdel[#fdel + 1] = idk
			cnt[S_IN_FLIGHT + 1] = cnt[S_IN_FLIGHT + 1] - 1
			cnt[to + 1] = cnt[to + 1] + 1
			if to == S_DELIVERED or to == S_DEAD then
				if has(flags, F_BIZ) then
					unindex(KEYS[8], dec(nrec), idk)
				end
				local z = to == S_DELIVERED and zdone or zdead
				z[#z + 1] = snow
				z[#z + 1] = idk
			elseif to == S_RETRYING then
				zdelay[#zdelay + 1] = n2s(due)
				zdelay[#zdelay + 1] = idk
				if not first_retry or due < first_retry then
					first_retry = due
				end
			else
				local pri = 0
				if has(flags, F_PRI) then
					pri = struct.unpack('>i2', nrec, 10 + tl)
				end
				zready[#zready + 1] = n2s((1023 - pri) * PRI_SPAN +
				    due)
				zready[#zready + 1] = idk
			end
			local entry = ARGV[b + 5]
			if entry ~= '' then
				if not logs[idk] then
					lids[#lids + 1] = idk
					logs[idk] = false
				end
				logged[#logged + 1] = {idk, entry}
			end
			res(0, to, ver)
		end
	end
end
if #fdel > 0 then
	redis.call('ZREM', KEYS[2], unpack(fdel))
	redis.call('HSET', KEYS[1], unpack(hset))
end
if #zdone > 0 then
	redis.call('ZADD', KEYS[6], unpack(zdone))
end
if #zdead > 0 then
	redis.call('ZADD', KEYS[5], unpack(zdead))
end
if #zdelay > 0 then
	redis.call('ZADD', KEYS[3], unpack(zdelay))
	fix_head(KEYS[3], KEYS[4], topic)
	wake_if_first(KEYS[4], topic, first_retry, tag)
end
if #zready > 0 then
	redis.call('ZADD', KEYS[10], unpack(zready))
	redis.call('SADD', KEYS[11], topic)
	redis.call('PUBLISH', 'rd:ready', tag .. ':' .. topic)
end
if #lids > 0 then
	local old = redis.call('HMGET', KEYS[9], unpack(lids))
	for i = 1, #lids do
		logs[lids[i]] = old[i] or ''
	end
	for i = 1, #logged do
		local e = logged[i]
		logs[e[1]] = log_append(logs[e[1]], e[2])
	end
	local ls = {}
	for i = 1, #lids do
		ls[#ls + 1] = lids[i]
		ls[#ls + 1] = logs[lids[i]]
	end
	redis.call('HSET', KEYS[9], unpack(ls))
end
for st = 0, 6 do		-- adds first (count())
	if cnt[st + 1] > 0 then
		count(KEYS[7], topic, st, cnt[st + 1])
	end
end
for st = 0, 6 do
	if cnt[st + 1] < 0 then
		count(KEYS[7], topic, st, cnt[st + 1])
	end
end
return out
