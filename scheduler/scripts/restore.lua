-- restore.lua - put a job back as the journal holds it, unless a job with
-- that id is there already (so restoring twice changes nothing).
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 ready of the topic,
--       5 ready topics, 6 dead of the topic, 7 finished, 8 counts,
--       9 bizkeys
-- ARGV: 1 now, 2 id key, 3 record (never in flight), 4 tag
-- Returns {1} when restored, {0} when the job was there, {2} when it is
-- not made because its bizkey names another unfinished job of its topic
-- (a topic holds one unfinished job per bizkey: the one Redis has wins).
local now = now_ms()
local idk, rec, tag = ARGV[2], ARGV[3], ARGV[4]
if redis.call('HEXISTS', KEYS[1], idk) == 1 then
	return {0}
end
local j = dec(rec)
if j.biz and unfinished(j.state) and
    biz_holder(KEYS[9], j.topic .. ':' .. j.biz) then
	return {2}	-- not idk: the pool has no idk (above)
end
redis.call('HSET', KEYS[1], idk, rec)
if j.state == S_SCHEDULED or j.state == S_RETRYING then
	redis.call('ZADD', KEYS[2], n2s(j.due), idk)
	fix_head(KEYS[2], KEYS[3], j.topic)
	wake_if_first(KEYS[3], j.topic, j.due, tag)
elseif j.state == S_READY then
	redis.call('ZADD', KEYS[4], n2s(ready_score(j)), idk)
	redis.call('SADD', KEYS[5], j.topic)
	redis.call('PUBLISH', 'rd:ready', tag .. ':' .. j.topic)
elseif j.state == S_DEAD then
	redis.call('ZADD', KEYS[6], n2s(now), idk)
else
	redis.call('ZADD', KEYS[7], n2s(now), idk)
end
if j.biz and unfinished(j.state) then
	redis.call('HSET', KEYS[9], j.topic .. ':' .. j.biz, idk)
end
count(KEYS[8], j.topic, j.state, 1)
return {1}
