-- push_many.lua - several new jobs of one topic in one shard (a batch, or
-- pushes that arrived together), each pushed as push.lua pushes one.
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 counts, 5 bizkeys
-- ARGV: 1 now, 2 tag "TENANT:SHARD", then per job: id key, record (state
--       scheduled, due = first attempt)
-- Returns the code of each job, in order (0 new, 1 existing: bizkey or
-- same id, -1 the id names a job of another topic), then for each job of
-- code 1, in order, its id key, due and state.  A new job's id, due and
-- state are the caller's own (the id key and record it sent), so the
-- common answer is one integer per job.
--
-- Key decision: the jobs are pushed in their order, so a job with the
-- bizkey of an earlier one of the same call gets that job's id, as a second
-- push would; the counts are added once and the topic's head read once, at
-- the end.  The caller bounds the jobs per call (scheduler.batch).
local tag = ARGV[2]
local out = {}
local added, first, topic = 0, nil, nil

local function one(idk, rec)
	local jdue, t, biz = peek(rec)
	local code, k, due, st = push_job(idk, rec, jdue, t, biz)
	topic = t
	if code == 0 then
		added = added + 1
		if first == nil or jdue < first then
			first = jdue
		end
	end
	return code, k, due, st
end

local old = {}
for i = 3, #ARGV - 1, 2 do
	local code, idk, due, st = one(ARGV[i], ARGV[i + 1])
	out[#out + 1] = code
	if code == 1 then
		old[#old + 1] = idk
		old[#old + 1] = due
		old[#old + 1] = st
	end
end
for i = 1, #old do
	out[#out + 1] = old[i]
end

if added > 0 then
	-- The earliest new job is the topic's head (or ties with it).
	local f = redis.call('ZRANGE', KEYS[2], '0', '0', 'WITHSCORES')
	if tonumber(f[2]) == first then
		redis.call('ZADD', KEYS[3], n2s(first), topic)
		wake_if_first(KEYS[3], topic, first, tag)
	end
	count(KEYS[4], topic, S_SCHEDULED, added)
end
return out
