-- push.lua - a new job, or the unfinished one that already has its bizkey.
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 counts, 5 bizkeys
-- ARGV: 1 now, 2 id key, 3 record (state scheduled, due = first attempt),
--       4 tag "TENANT:SHARD"
-- Returns {0, id key, due, state} for a new job, {1, id key, due, state}
-- for an existing one (bizkey or same id), {-1} when the id names a job of
-- another topic.
local idk, rec, tag = ARGV[2], ARGV[3], ARGV[4]
local jdue, topic, biz = peek(rec)
local code, k, due, st = push_job(idk, rec, jdue, topic, biz)
if code ~= 0 then
	if code < 0 then
		return {-1}
	end
	return {code, k, due, st}
end
local f = redis.call('ZRANGE', KEYS[2], '0', '0')
if f[1] == idk then
	redis.call('ZADD', KEYS[3], due, topic)
	wake_if_first(KEYS[3], topic, jdue, tag)
end
count(KEYS[4], topic, S_SCHEDULED, 1)
return {0, idk, due, S_SCHEDULED}
