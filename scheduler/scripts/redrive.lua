-- redrive.lua - dead jobs of a topic run their schedule again from now
-- (scheduled, attempts back to 0): one job (ARGV[4] its id key) or the
-- oldest ARGV[3] of the dead set per call.
-- KEYS: 1 pool, 2 dead of the topic, 3 delays of the topic, 4 heads,
--       5 counts, 6 bizkeys
-- ARGV: 1 now, 2 topic, 3 batch, 4 id key or "", 5 tag
-- Returns {n, left in the dead set, id key, record head, ...}; for one job
-- {-2} when there is none, {-3} not of that topic, {-1, state} not dead.
local now = now_ms()
local topic, batch, one, tag = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local ids
if one ~= '' then
	local j, err = job_of_topic(one, topic)
	if not j then
		return err
	end
	if j.state ~= S_DEAD then
		return {-1, j.state}
	end
	ids = {one}
else
	ids = redis.call('ZRANGE', KEYS[2], '0', n2s(batch - 1))
end
local out = {0, 0}
local n = 0
for i = 1, #ids do
	local idk = ids[i]
	local rec = redis.call('HGET', KEYS[1], idk)
	redis.call('ZREM', KEYS[2], idk)
	if rec then
		local j = dec(rec)
		j.state = S_SCHEDULED
		j.att = 0
		j.due = now
		j.ver = next_ver(j.ver)
		rec = enc(j)
		redis.call('HSET', KEYS[1], idk, rec)
		redis.call('ZADD', KEYS[3], n2s(now), idk)
		if j.biz then
			redis.call('HSETNX', KEYS[6], topic .. ':' .. j.biz,
			    idk)
		end
		n = n + 1
		out[#out + 1] = idk
		out[#out + 1] = head_of(rec, j)
	end
end
if n > 0 then
	fix_head(KEYS[3], KEYS[4], topic)
	wake_if_first(KEYS[4], topic, now, tag)
	count(KEYS[5], topic, S_SCHEDULED, n)
	count(KEYS[5], topic, S_DEAD, -n)
end
out[1] = n
out[2] = call_kept(0, 'ZCARD', KEYS[2])
return out
