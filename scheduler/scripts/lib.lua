-- lib.lua - helpers put in front of every job script at build time: the
-- packed job record (docs/internals/REDIS-SCHEMA.md), counts, shard heads.
--
-- Key decision: a job is one binary record in its shard's pool hash, read
-- and rewritten whole by the scripts (struct.pack, big-endian), so that a
-- pending job costs one hash field and one sorted-set member in Redis.  ARGV[1]
-- is always "now": empty means Redis server time (TIME), a number is the
-- injected test clock.  Every argument to redis.call is a string: Redis 7.0
-- turns a Lua number into one with printf's %.17g, several times the cost
-- of an integer's %d (n2s) or a constant string.

local F_PRI, F_ATT, F_CRE, F_TTR = 1, 2, 4, 8
local F_BIZ, F_HDR, F_SCH, F_RES = 16, 32, 64, 128
local F_VER = 128		-- in the state byte: the record has a version
local S_SCHEDULED, S_READY, S_IN_FLIGHT, S_RETRYING = 0, 1, 2, 3
local S_DELIVERED, S_DEAD, S_CANCELLED = 4, 5, 6
local PRI_SPAN = 4398046511104	-- 2^42: ready score = (1023 - pri) * 2^42 + due
local LOG_MAX = 20		-- attempts kept per job (the journal has all)

local function now_ms()
	if ARGV[1] ~= '' then
		return tonumber(ARGV[1])
	end
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer (times, scores: below 2^53) as Redis takes it.
local function n2s(x)
	return string.format('%d', x)
end

local STATE_S = {'0', '1', '2', '3', '4', '5', '6'}	-- [state + 1]

local function has(f, b)
	return bit.band(f, b) ~= 0
end

-- The record as a table.  .ver is the job's version: how many journaled
-- changes it has had (cancel, reschedule, redrive, an attempt's outcome),
-- 0 when none and the record holds none.
local function dec(rec)
	local j = {}
	local st, tl, p
	st, j.flags, j.due, tl, p = struct.unpack('>BBI6B', rec)
	j.state, j.ver = st % F_VER, 0
	j.topic = string.sub(rec, p, p + tl - 1)
	p = p + tl
	local f = j.flags
	j.pri, j.att = 0, 0
	if has(f, F_PRI) then j.pri, p = struct.unpack('>i2', rec, p) end
	if has(f, F_ATT) then j.att, p = struct.unpack('>I2', rec, p) end
	if has(f, F_CRE) then j.cre, p = struct.unpack('>I6', rec, p) end
	if has(f, F_TTR) then j.ttr, p = struct.unpack('>I6', rec, p) end
	if has(f, F_BIZ) then j.biz, p = struct.unpack('>I2c0', rec, p) end
	if has(f, F_HDR) then j.hdr, p = struct.unpack('>I4c0', rec, p) end
	if has(f, F_SCH) then j.sch, p = struct.unpack('>I2c0', rec, p) end
	if st >= F_VER then j.ver, p = struct.unpack('>I6', rec, p) end
	if has(f, F_RES) then
		j.tok = string.sub(rec, p, p + 21)
		j.dl, p = struct.unpack('>I6', rec, p + 22)
	end
	j.body = string.sub(rec, p)
	return j
end

local function enc(j)
	local f, st, t = 0, j.state, {}
	if j.pri ~= 0 then
		f = f + F_PRI
		t[#t + 1] = struct.pack('>i2', j.pri)
	end
	if j.att ~= 0 then
		f = f + F_ATT
		t[#t + 1] = struct.pack('>I2', math.min(j.att, 65535))
	end
	if j.cre then
		f = f + F_CRE
		t[#t + 1] = struct.pack('>I6', j.cre)
	end
	if j.ttr then
		f = f + F_TTR
		t[#t + 1] = struct.pack('>I6', j.ttr)
	end
	if j.biz then
		f = f + F_BIZ
		t[#t + 1] = struct.pack('>I2', #j.biz) .. j.biz
	end
	if j.hdr then
		f = f + F_HDR
		t[#t + 1] = struct.pack('>I4', #j.hdr) .. j.hdr
	end
	if j.sch then
		f = f + F_SCH
		t[#t + 1] = struct.pack('>I2', #j.sch) .. j.sch
	end
	if j.ver ~= 0 then
		st = st + F_VER
		t[#t + 1] = struct.pack('>I6', j.ver)
	end
	if j.tok then
		f = f + F_RES
		t[#t + 1] = j.tok .. struct.pack('>I6', j.dl)
	end
	return struct.pack('>BBI6B', st, f, j.due, #j.topic) .. j.topic ..
	    table.concat(t) .. j.body
end

-- The next version of a job: every change the journal records takes one,
-- so the journal applies a job's changes in Redis's order whichever
-- instance reports them and whatever its clock says.
local function next_ver(v)
	return v + 1
end

-- Where the optional fields of a record end (the reservation, if any, or
-- else the body begins), its time to run (nil: none), the position of its
-- attempts (nil: not stored) and of its version (nil: none): enough to
-- edit a record in place without decoding it whole (reserve, finish).
local function tail_at(rec)
	local st, f, _, tl = struct.unpack('>BBI6B', rec)
	local p, att, ttr, ver = 10 + tl, nil, nil, nil
	if has(f, F_PRI) then p = p + 2 end
	if has(f, F_ATT) then att = p; p = p + 2 end
	if has(f, F_CRE) then p = p + 6 end
	if has(f, F_TTR) then ttr = struct.unpack('>I6', rec, p); p = p + 6 end
	if has(f, F_BIZ) then p = p + 2 + struct.unpack('>I2', rec, p) end
	if has(f, F_HDR) then p = p + 4 + struct.unpack('>I4', rec, p) end
	if has(f, F_SCH) then p = p + 2 + struct.unpack('>I2', rec, p) end
	if st >= F_VER then ver = p; p = p + 6 end
	return p, ttr, att, ver
end

-- The record without its body (what transitions are reported with).
local function head_of(rec, j)
	return string.sub(rec, 1, #rec - #j.body)
end

-- The head of job j as it is reported for a change that removes its record
-- (drop): with the version that change takes.
local function head_next(j)
	local body = j.body
	j.ver, j.body = next_ver(j.ver), ''
	local h = enc(j)
	j.body = body
	return h
end

local function unfinished(state)
	return state <= S_RETRYING
end

-- The job idk of the pool (KEYS[1]) decoded, and its record; or nil and
-- the reply for no such job ({-2}) or a job of another topic ({-3}).
local function job_of_topic(idk, topic)
	local rec = redis.call('HGET', KEYS[1], idk)
	if not rec then
		return nil, {-2}
	end
	local j = dec(rec)
	if j.topic ~= topic then
		return nil, {-3}
	end
	return j, rec
end

-- A read of, or a deletion from, a key this script may have emptied and so
-- deleted (ZREM or HDEL of its last member): what the command returns, or
-- empty when the key is gone.  While the slot migrates away, Redis refuses
-- any command on a key it does not hold (the key may be on the new node),
-- inside a script too, and a script that fails halfway keeps what it
-- wrote.  Redis runs a script only when it holds every key the script
-- names (else ASK or TRYAGAIN, before anything runs), so a refusal here
-- means this script emptied the key.
local function call_kept(empty, ...)
	local r = redis.pcall(...)
	if type(r) == 'table' and r.err then
		if string.find(r.err, 'non local key', 1, true) then
			return empty
		end
		error(r)
	end
	return r
end

-- Adds delta to the counts of (topic, state) and of the tenant's state.
-- A script moving jobs between states adds before it subtracts: a count
-- reaching 0 is deleted, and the counts hash with its last count, which
-- a later add could not recreate while the slot migrates (call_kept).
local function count(ckey, topic, state, delta)
	if delta == 0 then
		return
	end
	local s, d = STATE_S[state + 1], n2s(delta)
	local f = topic .. ':' .. s
	if redis.call('HINCRBY', ckey, f, d) == 0 then
		redis.call('HDEL', ckey, f)
	end
	f = ':' .. s
	if redis.call('HINCRBY', ckey, f, d) == 0 then
		redis.call('HDEL', ckey, f)
	end
end

-- Keeps the shard's heads set in step with the head of a topic's delays.
local function fix_head(dkey, hkey, topic)
	local f = call_kept({}, 'ZRANGE', dkey, '0', '0', 'WITHSCORES')
	if #f == 0 then
		redis.call('ZREM', hkey, topic)
	else
		redis.call('ZADD', hkey, f[2], topic)
	end
end

local function shard_head(hkey)
	local f = call_kept({}, 'ZRANGE', hkey, '0', '0', 'WITHSCORES')
	if #f == 0 then
		return -1
	end
	return tonumber(f[2])
end

-- What a push needs of a new job's record: its due time, topic and bizkey
-- (nil: none), read without decoding the rest (dec copies the body).
local function peek(rec)
	local _, f, due, tl, p = struct.unpack('>BBI6B', rec)
	local topic, biz = string.sub(rec, p, p + tl - 1), nil
	if has(f, F_BIZ) then
		p = p + tl
		if has(f, F_PRI) then p = p + 2 end
		if has(f, F_ATT) then p = p + 2 end
		if has(f, F_CRE) then p = p + 6 end
		if has(f, F_TTR) then p = p + 6 end
		biz = struct.unpack('>I2c0', rec, p)
	end
	return due, topic, biz
end

-- The unfinished job that field f (topic:bizkey) of the bizkey index bkey
-- names, in the pool (KEYS[1]): its id key and the job decoded; or nil,
-- nil, and true when the field is there but names no unfinished job.
local function biz_holder(bkey, f)
	local ex = redis.call('HGET', bkey, f)
	if not ex then
		return nil, nil, false
	end
	local er = redis.call('HGET', KEYS[1], ex)
	if er then
		local e = dec(er)
		if unfinished(e.state) then
			return ex, e, false
		end
	end
	return nil, nil, true
end

-- Pushes one new job (push, push_many): KEYS 1 pool, 2 delays of the
-- topic, 5 bizkeys; due, topic and biz are the record's (peek).  Returns
-- code, id key, due, state: 0 for a new job (the caller fixes the head and
-- counts), 1 for the unfinished job with its bizkey or its id, -1 when the
-- id names another topic's job.  HSETNX both tests for the id and writes
-- the record: a new job, the common case, costs no read of the pool.
local function push_job(idk, rec, due, topic, biz)
	if biz then
		local f = topic .. ':' .. biz
		local ex, e, stale = biz_holder(KEYS[5], f)
		if ex then
			return 1, ex, n2s(e.due), e.state
		elseif stale then
			redis.call('HDEL', KEYS[5], f)
		end
	end
	if redis.call('HSETNX', KEYS[1], idk, rec) == 0 then
		local e = dec(redis.call('HGET', KEYS[1], idk))
		if e.topic ~= topic then
			return -1, '', 0, 0
		end
		return 1, idk, n2s(e.due), e.state
	end
	local sdue = n2s(due)
	redis.call('ZADD', KEYS[2], sdue, idk)
	if biz then
		redis.call('HSET', KEYS[5], topic .. ':' .. biz, idk)
	end
	return 0, idk, sdue, S_SCHEDULED
end

-- Tells the timers when a job became the earliest of its shard.  tag is
-- "TENANT:SHARD".
local function wake_if_first(hkey, topic, due, tag)
	local f = redis.call('ZRANGE', hkey, '0', '0', 'WITHSCORES')
	if f[1] == topic and tonumber(f[2]) == due then
		redis.call('PUBLISH', 'rd:wake', tag .. ':' .. n2s(due))
	end
end

local function ready_score(j)
	return (1023 - j.pri) * PRI_SPAN + j.due
end

-- A job's log (packed attempts) with entry appended, keeping the last
-- LOG_MAX.
-- An entry: I6 at, I2 status, I4 latency, I2 len + error, I2 len + excerpt.
local function log_append(s, entry)
	s = s .. entry
	local offs, p = {}, 1
	while p <= #s do
		offs[#offs + 1] = p
		local elen = struct.unpack('>I2', s, p + 12)
		local xlen = struct.unpack('>I2', s, p + 14 + elen)
		p = p + 16 + elen + xlen
	end
	if #offs > LOG_MAX then
		s = string.sub(s, offs[#offs - LOG_MAX + 1])
	end
	return s
end

-- Drops the bizkey index entry of a job that finished.
local function unindex(bkey, j, idk)
	if j.biz then
		local f = j.topic .. ':' .. j.biz
		if redis.call('HGET', bkey, f) == idk then
			redis.call('HDEL', bkey, f)
		end
	end
end
