-- purge.lua - finished (delivered, cancelled) jobs leave Redis once their
-- retention has passed; at most ARGV[3] per call.  Dead jobs are never
-- purged: they stay until redriven.
-- KEYS: 1 pool, 2 finished, 3 counts, 4 attempt logs
-- ARGV: 1 now, 2 retention (ms), 3 batch
-- Returns {purged, more}.
local now = now_ms()
local cut = now - tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', n2s(cut),
    'LIMIT', '0', ARGV[3])
local n = 0
for i = 1, #ids do
	local idk = ids[i]
	local rec = call_kept(false, 'HGET', KEYS[1], idk)
	if rec then
		local j = dec(rec)
		if not unfinished(j.state) and j.state ~= S_DEAD then
			redis.call('HDEL', KEYS[1], idk)
			call_kept(0, 'HDEL', KEYS[4], idk)
			count(KEYS[3], j.topic, j.state, -1)
			n = n + 1
		end
	end
end
if #ids > 0 then
	redis.call('ZREM', KEYS[2], unpack(ids))
end
local more = 0
if #ids == tonumber(ARGV[3]) then
	more = 1
end
return {n, more}
