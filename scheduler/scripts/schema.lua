-- schema.lua - read the schema marker, writing it first when ARGV[2] is
-- "1" and there is none (a fresh Redis, or after a restore), and raising
-- a version this build reads as it is (ARGV[5] up to ARGV[3]) to ARGV[3],
-- so that older builds, which cannot read what this one writes, refuse it.
-- KEYS: 1 rd:schema
-- ARGV: 1 now (unused), 2 "1" to write, 3 version, 4 shards, 5 the oldest
--       version read as it is
-- Returns {version, shards, 1 when written now}, or {} when there is none.
local v = redis.call('HMGET', KEYS[1], 'version', 'shards')
if not v[1] and ARGV[2] == '1' then
	redis.call('HSET', KEYS[1], 'version', ARGV[3], 'shards', ARGV[4])
	return {ARGV[3], ARGV[4], 1}
end
if not v[1] then
	return {}
end
local n = tonumber(v[1])
if n and n >= tonumber(ARGV[5]) and n < tonumber(ARGV[3]) then
	redis.call('HSET', KEYS[1], 'version', ARGV[3])
	v[1] = ARGV[3]
end
return {v[1], v[2] or '', 0}
