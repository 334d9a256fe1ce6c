-- schedule.lua: Store.set_schedule, rule 24 of the store contract. The job's
-- stored schedule is replaced by the record given, its version one more than
-- the last (1 for the first; a record gone back to 'code' keeps its key, so
-- the version never goes back), stamped with the server's now. From then on
-- claim.lua answers a claim from an older version stale (rule 23).
-- KEYS: the job's seven keys (see common.lua).
-- ARGV: the record's fields but version and ms, as field, value, field, ...:
--       source and by always; schedule, tz, task, kwargs and options when
--       the record has them (kwargs and options: JSON text, kept as given)
-- Returns: the record, {'version', version, 'ms', ms, field, value, ...}, its
-- integers as decimal strings. The caller then adds it to the changelog
-- (changes.lua), whose keys live outside every job's hash tag.

local version = redis.call('HINCRBY', K.schedule, 'version', 1) -- rule 24
local record = {'version', int(version), 'ms', int(now_ms())}
for i = 1, #ARGV do
  record[#record + 1] = ARGV[i]
end
redis.call('DEL', K.schedule) -- rule 24: the record replaces the one before, field by field
redis.call('HSET', K.schedule, unpack(record))
return record
