-- changes.lua: the changelog of stored schedules, across jobs, so that
-- Store.schedule_changes is one round trip whose cost grows with the changes
-- it returns only (rule 24). Its keys share a hash tag of their own,
-- {:schedules}, which no job's tag can be (a job's is its name quoted, never
-- with a colon): a job's scripts cannot write them on a cluster. The store
-- adds a change after schedule.lua, in one MULTI/EXEC with it but on a
-- cluster, and the job's schedule key stays the truth (claim.lua fences on
-- it, rule 23). common.lua is not prepended: this script takes no job's keys
-- but, to add a change outside a cluster, the job's schedule key.
-- KEYS[1] <prefix>:{:schedules}:cursor   string  the count of changes: the cursor
-- KEYS[2] <prefix>:{:schedules}:changed  zset    member: a job; score: the cursor
--                                                of its newest change
-- KEYS[3] <prefix>:{:schedules}:records  hash    job -> its newest record, a JSON
--                                                object of the fields of its
--                                                schedule key (all text)
-- ARGV[1] 'read', ARGV[2] since: returns {cursor, job, record, job, record, ...},
--         each job changed after the cursor since once, oldest change first
-- ARGV[1] 'add', ARGV[2] job, ARGV[3...] the record as schedule.lua returned it
--         (field, value, ...), or, instead, KEYS[4] the job's schedule key to read
--         it from: stores the record as the change the cursor counts next, unless
--         the changelog holds that version of the job or a newer one (two changes
--         of a job may reach it out of order on a cluster; a held record that is
--         no JSON object is replaced). Returns 1 if it stored the record, else 0.

local cursor, changed, records, op = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
if op == 'read' then
  local reply = {redis.call('GET', cursor) or '0'}
  for _, job in ipairs(redis.call('ZRANGEBYSCORE', changed, '(' .. ARGV[2], '+inf')) do
    reply[#reply + 1] = job
    reply[#reply + 1] = redis.call('HGET', records, job)
  end
  return reply
end

local job, fields = ARGV[2], {}
if KEYS[4] then
  fields = redis.call('HGETALL', KEYS[4])
else
  for i = 3, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
end
local record = {}
for i = 1, #fields, 2 do
  record[fields[i]] = fields[i + 1]
end
local version = tonumber(record.version)
if version == nil then -- the job has no stored schedule: nothing changed
  return 0
end
local held = redis.call('HGET', records, job)
if held then -- rule 24: a change never replaces a newer one
  local ok, old = pcall(cjson.decode, held)
  if ok and type(old) == 'table' and (tonumber(old.version) or 0) >= version then
    return 0
  end
end
redis.call('ZADD', changed, string.format('%d', redis.call('INCR', cursor)), job)
redis.call('HSET', records, job, cjson.encode(record))
return 1
