-- push_many.lua - several new jobs of one topic in one shard (a batch, or
-- pushes that arrived together), each answered as push.lua answers one.
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
-- bizkey (or the id) of an earlier one of the same call gets that job's id,
-- as a second push would; the new jobs without a bizkey are written
-- together at the end, the counts added once and the topic's head read
-- once.  The caller bounds the jobs per call (scheduler.batch).
local tag = ARGV[2]
local out = {}
local added, first, topic = 0, nil, nil
local ids = {}
for i = 3, #ARGV - 1, 2 do
	ids[#ids + 1] = ARGV[i]
end
-- A job without a bizkey, the common case, costs no command of its own:
-- one HMGET tells which ids exist, one HSET and one ZADD write the new.
local ex = #ids > 0 and redis.call('HMGET', KEYS[1], unpack(ids)) or {}
local made = {}		-- id key -> record of a job new in this call
local hset, zadd = {}, {}

-- The job of the record er (found under id key idk): code 1 with its
-- id key, due and state when it has topic t, else -1.
local function existing(idk, er, t)
	local e = dec(er)
	if e.topic ~= t then
		return -1, '', 0, 0
	end
	return 1, idk, n2s(e.due), e.state
end

local function one(k, idk, rec)
	local jdue, t, biz = peek(rec)
	local code, kk, due, st
	topic = t
	if made[idk] then
		return existing(idk, made[idk], t)
	end
	if biz then	-- its deduplication reads and writes as it goes
		code, kk, due, st = push_job(idk, rec, jdue, t, biz)
	elseif ex[k] then
		return existing(idk, ex[k], t)
	else
		code, kk, due, st = 0, idk, n2s(jdue), S_SCHEDULED
		hset[#hset + 1] = idk
		hset[#hset + 1] = rec
		zadd[#zadd + 1] = due
		zadd[#zadd + 1] = idk
	end
	if code == 0 then
		made[idk] = rec
		added = added + 1
		if first == nil or jdue < first then
			first = jdue
		end
	end
	return code, kk, due, st
end

local old = {}
for k = 1, #ids do
	local code, idk, due, st = one(k, ids[k], ARGV[2 + 2 * k])
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
if #hset > 0 then
	redis.call('HSET', KEYS[1], unpack(hset))
	redis.call('ZADD', KEYS[2], unpack(zadd))
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
