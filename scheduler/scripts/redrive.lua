-- redrive.lua - dead jobs of a topic run their schedule again: scheduled,
-- attempts back to 0, the first attempt at now plus the first wait of the
-- job's schedule.  The caller reads the schedules (the job's own or its
-- topic's), so it first peeks at the dead jobs, then gives each one's wait;
-- each job is checked again here, so a job that changed between the two is
-- left as it is.  A job whose bizkey names another unfinished job of the
-- topic stays dead (a topic holds one unfinished job per bizkey).
-- KEYS: 1 pool, 2 dead of the topic, 3 delays of the topic, 4 heads,
--       5 counts, 6 bizkeys
-- ARGV: 1 now, 2 topic, 3 tag, 4 what:
--   'p' (peek): 5 batch, 6 index, 7 id key or "": up to ARGV[5] dead jobs
--       from just after that job while it is still dead, else from index
--       ARGV[6]; returns {jobs in the dead set, jobs looked at, id key,
--       record head, ...} (an id without a record leaves the dead set)
--   'a' (apply), 'o' (one job): 5 per job, packed (struct '>I2c0I6'),
--       its id key and its first wait (ms); returns {n moved, n left dead
--       for their bizkey, id key of the last of those or "", the id key
--       of the job holding that one's bizkey or "", then id key and record
--       head of each moved}; for 'o' also {-2} no such job, {-3} not of
--       that topic, {-1, state} not dead.
local now = now_ms()
local topic, tag, what = ARGV[2], ARGV[3], ARGV[4]

if what == 'p' then
	local batch, at, after = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
	if after ~= '' then
		local r = redis.call('ZRANK', KEYS[2], after)
		if r then
			at = r + 1
		end
	end
	local out = {redis.call('ZCARD', KEYS[2])}
	local ids = redis.call('ZRANGE', KEYS[2], n2s(at), n2s(at + batch - 1))
	out[2] = #ids
	for i = 1, #ids do
		local rec = redis.call('HGET', KEYS[1], ids[i])
		if rec then
			local p = tail_at(rec)
			out[#out + 1] = ids[i]
			out[#out + 1] = string.sub(rec, 1, p - 1)
		else
			redis.call('ZREM', KEYS[2], ids[i])
		end
	end
	return out
end

local out = {0, 0, '', ''}
local n, skipped, first = 0, 0, nil
local packed, at = ARGV[5], 1
while at <= #packed do
	local idk, wait
	idk, wait, at = struct.unpack('>I2c0I6', packed, at)
	local rec = redis.call('HGET', KEYS[1], idk)
	local j = rec and dec(rec)
	if what == 'o' then
		if not j then
			return {-2}
		elseif j.topic ~= topic then
			return {-3}
		elseif j.state ~= S_DEAD then
			return {-1, j.state}
		end
	end
	local dead = j and j.topic == topic and j.state == S_DEAD
	local ex = dead and j.biz and
	    biz_holder(KEYS[6], topic .. ':' .. j.biz)
	if ex then
		skipped = skipped + 1
		out[3], out[4] = idk, ex
	elseif dead then
		redis.call('ZREM', KEYS[2], idk)
		j.state = S_SCHEDULED
		j.att = 0
		j.due = now + wait
		j.ver = next_ver(j.ver)
		rec = enc(j)
		redis.call('HSET', KEYS[1], idk, rec)
		redis.call('ZADD', KEYS[3], n2s(j.due), idk)
		if j.biz then
			-- None holds it, or a finished job still named there.
			redis.call('HSET', KEYS[6], topic .. ':' .. j.biz, idk)
		end
		if not first or j.due < first then
			first = j.due
		end
		n = n + 1
		out[#out + 1] = idk
		out[#out + 1] = head_of(rec, j)
	end
end
if n > 0 then
	fix_head(KEYS[3], KEYS[4], topic)
	wake_if_first(KEYS[4], topic, first, tag)
	count(KEYS[5], topic, S_SCHEDULED, n)
	count(KEYS[5], topic, S_DEAD, -n)
end
out[1], out[2] = n, skipped
return out
