-- promote.lua - move due jobs of one topic of one shard to its ready set:
-- at most ARGV[3] per call, so a burst is promoted by many short calls.
-- KEYS: 1 pool, 2 delays of the topic, 3 heads, 4 ready of the topic,
--       5 ready topics, 6 counts
-- ARGV: 1 now, 2 topic, 3 batch, 4 tag "TENANT:SHARD"
-- Returns {moved, more (1: more are due now), shard head (-1: none),
-- id key, record head, ...} for the jobs moved.  Never moves a job whose
-- due time is after now.
local now = now_ms()
local topic, batch, tag = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', n2s(now),
    'LIMIT', 0, batch)
local out = {0, 0, -1}
local moved, nsched, nretry = 0, 0, 0
for i = 1, #ids do
	local idk = ids[i]
	local rec = redis.call('HGET', KEYS[1], idk)
	if rec then
		local j = dec(rec)
		if j.state == S_SCHEDULED then
			nsched = nsched + 1
		else
			nretry = nretry + 1
		end
		local from = j.state
		j.state = S_READY
		rec = enc(j)
		redis.call('HSET', KEYS[1], idk, rec)
		redis.call('ZADD', KEYS[4], n2s(ready_score(j)), idk)
		moved = moved + 1
		out[#out + 1] = idk
		out[#out + 1] = string.char(from) .. head_of(rec, j)
	end
end
if #ids > 0 then
	redis.call('ZREM', KEYS[2], unpack(ids))
	fix_head(KEYS[2], KEYS[3], topic)
end
if moved > 0 then
	count(KEYS[6], topic, S_SCHEDULED, -nsched)
	count(KEYS[6], topic, S_RETRYING, -nretry)
	count(KEYS[6], topic, S_READY, moved)
	redis.call('SADD', KEYS[5], topic)
	redis.call('PUBLISH', 'rd:ready', tag .. ':' .. topic)
end
out[1] = moved
local nx = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #nx > 0 and tonumber(nx[2]) <= now then
	out[2] = 1
end
out[3] = n2s(shard_head(KEYS[3]))
return out
