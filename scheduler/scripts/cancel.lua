-- cancel.lua - cancel a job that has not finished.
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 ready of the topic,
--       5 ready topics, 6 in flight, 7 finished, 8 counts, 9 bizkeys
-- ARGV: 1 now, 2 id key, 3 topic
-- Returns {0, from state, record head}, {-1, state} when finished, {-2}
-- when there is no such job, {-3} when it is not of that topic.
local now = now_ms()
local idk, topic = ARGV[2], ARGV[3]
local j, rec = job_of_topic(idk, topic)
if not j then
	return rec
end
local from = j.state
if not unfinished(from) then
	return {-1, from}
end
if from == S_SCHEDULED or from == S_RETRYING then
	redis.call('ZREM', KEYS[2], idk)
	fix_head(KEYS[2], KEYS[3], topic)
elseif from == S_READY then
	redis.call('ZREM', KEYS[4], idk)
	if call_kept(0, 'ZCARD', KEYS[4]) == 0 then
		redis.call('SREM', KEYS[5], topic)
	end
else
	redis.call('ZREM', KEYS[6], idk)
	j.tok, j.dl = nil, nil
end
j.state, j.ver = S_CANCELLED, next_ver(j.ver)
rec = enc(j)
redis.call('HSET', KEYS[1], idk, rec)
redis.call('ZADD', KEYS[7], n2s(now), idk)
unindex(KEYS[9], j, idk)
count(KEYS[8], topic, S_CANCELLED, 1)
count(KEYS[8], topic, from, -1)
return {0, from, head_of(rec, j)}
