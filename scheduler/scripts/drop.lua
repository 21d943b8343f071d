-- drop.lua - a deleted topic's jobs leave the shard (DELETE of a topic or
-- tenant with ?force=true): at most ARGV[3] per call, the caller loops.
-- Mode "w" takes them from the topic's own sets (delays, ready, dead);
-- mode "s" walks a shard-wide set (in flight, finished) from index ARGV[5]
-- and takes the members of the topic (of any topic when ARGV[2] is "").
-- A job taken is gone whole (record, set, attempt log, bizkey, counts), so
-- a topic or tenant made again with the same name starts empty.
-- KEYS: 1 pool, 2 counts, 3 bizkeys, 4 attempt logs, then for "w": 5 delays
--       of the topic, 6 heads, 7 ready of the topic, 8 ready topics, 9 dead
--       of the topic; for "s": 5 the set walked
-- ARGV: 1 now, 2 topic, 3 batch, 4 mode ("w" or "s"), 5 index ("s")
-- Returns {left, next index, id key, record head, ...}: left is what the
-- topic's sets still hold ("w"), or 1 when the walk is not over ("s");
-- each unfinished or dead job taken is listed, its head with the state it
-- had, for the transition to cancelled.
local topic, batch, mode = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local taken, report, deltas = {}, {}, {}	-- deltas[topic][state]
local next_at = 0

-- Takes from set skey the jobs of ids (records recs, nil when gone) that
-- are the topic's (any: all); a member without a record just leaves the
-- set.  Returns how many stay.
local function take(skey, ids, recs, any)
	local rm = {}
	for i = 1, #ids do
		local idk, rec = ids[i], recs[i]
		local j = rec and dec(rec)
		if not j then
			rm[#rm + 1] = idk
		elseif any or j.topic == topic then
			rm[#rm + 1] = idk
			taken[#taken + 1] = idk
			if unfinished(j.state) or j.state == S_DEAD then
				report[#report + 1] = idk
				report[#report + 1] = head_next(j)
			end
			local d = deltas[j.topic] or {}
			deltas[j.topic] = d
			d[j.state] = (d[j.state] or 0) - 1
			if j.biz then
				local f = j.topic .. ':' .. j.biz
				if call_kept(false, 'HGET', KEYS[3], f) == idk then
					call_kept(0, 'HDEL', KEYS[3], f)
				end
			end
		end
	end
	if #rm > 0 then
		redis.call('ZREM', skey, unpack(rm))
	end
	return #ids - #rm
end

local function records(ids)
	if #ids == 0 then
		return {}
	end
	return call_kept({}, 'HMGET', KEYS[1], unpack(ids))
end

local left = 0
if mode == 'w' then
	local room = batch
	for _, k in ipairs({5, 7, 9}) do
		if room > 0 then
			local ids = call_kept({}, 'ZRANGE', KEYS[k], '0',
			    n2s(room - 1))
			take(KEYS[k], ids, records(ids), true)
			room = room - #ids
		end
	end
	fix_head(KEYS[5], KEYS[6], topic)
	if call_kept(0, 'ZCARD', KEYS[7]) == 0 then
		redis.call('SREM', KEYS[8], topic)
	end
	left = call_kept(0, 'ZCARD', KEYS[5]) + call_kept(0, 'ZCARD', KEYS[7]) +
	    call_kept(0, 'ZCARD', KEYS[9])
else
	local at = tonumber(ARGV[5])
	local ids = call_kept({}, 'ZRANGE', KEYS[5], n2s(at),
	    n2s(at + batch - 1))
	next_at = at + take(KEYS[5], ids, records(ids), topic == '')
	if #ids == batch then
		left = 1
	end
end

if #taken > 0 then
	redis.call('HDEL', KEYS[1], unpack(taken))
	call_kept(0, 'HDEL', KEYS[4], unpack(taken))
end
-- The counts, of the topic's state then of the shard's, each field once.
for t, by_state in pairs(deltas) do
	for st, d in pairs(by_state) do
		count(KEYS[2], t, st, d)
	end
end
local out = {left, next_at}
for i = 1, #report do
	out[#out + 1] = report[i]
end
return out
