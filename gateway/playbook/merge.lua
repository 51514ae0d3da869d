-- Apply ACE operations to one playbook atomically and idempotently.
-- KEYS[1] bullets hash (id -> JSON), KEYS[2] meta hash (version, seq:<slug>),
-- KEYS[3] applied set (operation ids already merged).
-- ARGV[1] JSON list of operations, ARGV[2] now (seconds, float), ARGV[3] the version the
-- caller checked the operations against, or '' for none.
-- Returns a flat list: outcome1, bullet_id1, outcome2, bullet_id2, ... or {'stale'} (nothing
-- applied) when the playbook's version is no longer ARGV[3].
if ARGV[3] and ARGV[3] ~= '' then
  local version = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
  if version ~= tonumber(ARGV[3]) then return {'stale'} end
end
local ops = cjson.decode(ARGV[1])
local now = tonumber(ARGV[2])
local out = {}
local changed = 0

local function load(id)
  local raw = redis.call('HGET', KEYS[1], id)
  if not raw then return nil end
  return cjson.decode(raw)
end

local function save(b)
  if type(b.sources) == 'table' and next(b.sources) == nil then
    b.sources = nil  -- cjson would write {} for an empty list; the reader defaults to []
  end
  redis.call('HSET', KEYS[1], b.id, cjson.encode(b))
end

local function add_sources(b, extra)
  b.sources = (type(b.sources) == 'table') and b.sources or {}
  local seen = {}
  for _, s in ipairs(b.sources) do seen[s] = true end
  for _, s in ipairs(extra or {}) do
    if not seen[s] and #b.sources < 50 then table.insert(b.sources, s); seen[s] = true end
  end
end

local function apply(op)
  if op.type == 'ADD' then
    local n = redis.call('HINCRBY', KEYS[2], 'seq:' .. op.slug, 1)
    local id = op.slug .. '-' .. string.format('%05d', n)
    local b = {id = id, section = op.section, content = op.content, helpful = 0, harmful = 0,
               status = op.status, sources = {}, created_at = now, updated_at = now}
    add_sources(b, op.sources)
    save(b)
    return 'applied', id
  end
  local b = load(op.id)
  if not b then return 'missing', op.id end
  if op.type == 'REMOVE' then
    redis.call('HDEL', KEYS[1], op.id)
  elseif op.type == 'UPDATE' then
    b.content = op.content
    b.updated_at = now
    add_sources(b, op.sources)
    save(b)
  elseif op.type == 'TAG' then
    b.helpful = math.max(0, (b.helpful or 0) + op.helpful)
    b.harmful = math.max(0, (b.harmful or 0) + op.harmful)
    b.updated_at = now
    add_sources(b, op.sources)
    save(b)
  elseif op.type == 'FOLD' then
    local keep = load(op.into)
    if not keep then return 'missing', op.into end
    keep.helpful = (keep.helpful or 0) + (b.helpful or 0)
    keep.harmful = (keep.harmful or 0) + (b.harmful or 0)
    add_sources(keep, b.sources)
    keep.updated_at = now
    save(keep)
    redis.call('HDEL', KEYS[1], op.id)
  elseif op.type == 'STATUS' then
    b.status = op.status
    b.updated_at = now
    save(b)
  else
    return 'missing', op.id
  end
  return 'applied', op.id
end

for _, op in ipairs(ops) do
  if redis.call('SISMEMBER', KEYS[3], op.op_id) == 1 then
    table.insert(out, 'duplicate')
    table.insert(out, op.id)
  else
    local outcome, id = apply(op)
    -- A missing target is recorded too: redelivering it later must not apply it then.
    redis.call('SADD', KEYS[3], op.op_id)
    if outcome == 'applied' then changed = changed + 1 end
    table.insert(out, outcome)
    table.insert(out, id)
  end
end
if changed > 0 then redis.call('HINCRBY', KEYS[2], 'version', 1) end
return out
