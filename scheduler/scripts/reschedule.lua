-- reschedule.lua - move a waiting (scheduled or retrying) job in place.
-- KEYS: 1 pool, 2 delays of the topic, 3 heads
-- ARGV: 1 now, 2 id key, 3 topic, 4 new due, 5 tag "TENANT:SHARD"
-- Returns {0, state, record head}, {-1, state} when not waiting, {-2} when
-- there is no such job, {-3} when it is not of that topic.
local idk, topic, due, tag = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local j, rec = job_of_topic(idk, topic)
if not j then
	return rec
end
if j.state ~= S_SCHEDULED and j.state ~= S_RETRYING then
	return {-1, j.state}
end
j.due, j.ver = due, next_ver(j.ver)
rec = enc(j)
redis.call('HSET', KEYS[1], idk, rec)
redis.call('ZADD', KEYS[2], n2s(due), idk)
fix_head(KEYS[2], KEYS[3], topic)
wake_if_first(KEYS[3], topic, due, tag)
return {0, j.state, head_of(rec, j)}
