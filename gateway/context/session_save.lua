-- Save a session's changed fields, decisions as a delta on the version they were read at.
-- KEYS[1]: the session hash.
-- ARGV[1]: the decisions_version the state was read at ("" when none); ARGV[2]: "delta" or
-- "all"; ARGV[3]: TTL in seconds; ARGV[4]: n, the number of field/value pairs that follow;
-- then n pairs to HSET; then the fields to HDEL.
-- "delta" applies only if the stored version is still ARGV[1] (returns 0 otherwise: another
-- call changed the decisions since, and the caller saves "all" instead). "all" first deletes
-- every decision field (and a legacy blob), so the caller's decisions replace them whole:
-- the last writer wins, as with the single blob before.
local key = KEYS[1]
if ARGV[2] == 'delta' then
  local current = redis.call('HGET', key, 'decisions_version') or ''
  if current ~= ARGV[1] then
    return 0
  end
else
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 2) == 'd:' or field == 'decisions' then
      redis.call('HDEL', key, field)
    end
  end
end
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  redis.call('HSET', key, ARGV[5 + 2 * i], ARGV[6 + 2 * i])
end
for i = 5 + 2 * n, #ARGV do
  redis.call('HDEL', key, ARGV[i])
end
redis.call('EXPIRE', key, ARGV[3])
return 1
