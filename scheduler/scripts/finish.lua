-- finish.lua - apply the outcome of an attempt to a job in flight: done,
-- retry at a time, dead, or release (back to ready, no attempt counted).
-- Fenced: refused unless the token is the current reservation's, so a late
-- ack cannot finish a job that was redelivered, and an expiry and an ack
-- racing for one reservation apply exactly once.
-- KEYS: 1 pool, 2 in flight, 3 delays of the topic, 4 heads, 5 dead of the
--       topic, 6 finished, 7 counts, 8 bizkeys, 9 attempt logs,
--       10 ready of the topic, 11 ready topics
-- ARGV: 1 now, 2 id key, 3 topic, 4 token, 5 verdict (done retry dead
--       release), 6 next attempt (retry), 7 packed attempt or "",
--       8 "1": only if the deadline has passed (expiry), 9 tag
-- Returns {0, new state, record head}, {-2} no such job, {-3} not of that
-- topic, {-4, state} stale token, {-5} deadline not reached.
local now = now_ms()
local idk, topic, token, verdict = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local rec = redis.call('HGET', KEYS[1], idk)
if not rec then
	return {-2}
end
local j = dec(rec)
if j.topic ~= topic then
	return {-3}
end
if j.state ~= S_IN_FLIGHT or j.tok ~= token then
	return {-4, j.state}
end
if ARGV[8] == '1' then
	local dl = redis.call('ZSCORE', KEYS[2], idk)
	if dl and tonumber(dl) > now then
		return {-5}
	end
end
redis.call('ZREM', KEYS[2], idk)
j.tok, j.dl = nil, nil
if verdict ~= 'release' then
	j.att = j.att + 1
end
if verdict == 'done' then
	j.state = S_DELIVERED
	redis.call('ZADD', KEYS[6], n2s(now), idk)
	unindex(KEYS[8], j, idk)
elseif verdict == 'retry' then
	j.state = S_RETRYING
	j.due = tonumber(ARGV[6])
	redis.call('ZADD', KEYS[3], n2s(j.due), idk)
	fix_head(KEYS[3], KEYS[4], topic)
	wake_if_first(KEYS[4], topic, j.due, ARGV[9])
elseif verdict == 'dead' then
	j.state = S_DEAD
	redis.call('ZADD', KEYS[5], n2s(now), idk)
	unindex(KEYS[8], j, idk)
else
	j.state = S_READY
	redis.call('ZADD', KEYS[10], n2s(ready_score(j)), idk)
	redis.call('SADD', KEYS[11], topic)
	redis.call('PUBLISH', 'rd:ready', ARGV[9] .. ':' .. topic)
end
rec = enc(j)
redis.call('HSET', KEYS[1], idk, rec)
log_attempt(KEYS[9], idk, ARGV[7])
count(KEYS[7], topic, S_IN_FLIGHT, -1)
count(KEYS[7], topic, j.state, 1)
return {0, j.state, head_of(rec, j)}
