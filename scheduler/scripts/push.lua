-- push.lua - a new job, or the unfinished one that already has its bizkey.
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 counts, 5 bizkeys
-- ARGV: 1 now, 2 id key, 3 record (state scheduled, due = first attempt),
--       4 tag "TENANT:SHARD"
-- Returns {0, id key, due, state} for a new job, {1, id key, due, state}
-- for an existing one (bizkey or same id), {-1} when the id names a job of
-- another topic.
local idk, rec, tag = ARGV[2], ARGV[3], ARGV[4]
local j = dec(rec)

if j.biz then
	local f = j.topic .. ':' .. j.biz
	local ex = redis.call('HGET', KEYS[5], f)
	if ex then
		local er = redis.call('HGET', KEYS[1], ex)
		if er then
			local e = dec(er)
			if unfinished(e.state) then
				return {1, ex, n2s(e.due), e.state}
			end
		end
		redis.call('HDEL', KEYS[5], f)
	end
end

local old = redis.call('HGET', KEYS[1], idk)
if old then
	local e = dec(old)
	if e.topic ~= j.topic then
		return {-1}
	end
	return {1, idk, n2s(e.due), e.state}
end

redis.call('HSET', KEYS[1], idk, rec)
redis.call('ZADD', KEYS[2], n2s(j.due), idk)
local f = redis.call('ZRANGE', KEYS[2], 0, 0)
if f[1] == idk then
	redis.call('ZADD', KEYS[3], n2s(j.due), j.topic)
	wake_if_first(KEYS[3], j.topic, j.due, tag)
end
if j.biz then
	redis.call('HSET', KEYS[5], j.topic .. ':' .. j.biz, idk)
end
count(KEYS[4], j.topic, S_SCHEDULED, 1)
return {0, idk, n2s(j.due), S_SCHEDULED}
