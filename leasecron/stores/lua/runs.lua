-- runs.lua: the reads Store.runs and Store.unfinished, in one round trip.
-- KEYS: the job's runs, slots, running, finished (see common.lua).
-- ARGV[1] 'runs' (newest slot first, at most ARGV[2]) or 'unfinished'
--         (the running runs, oldest slot first)
-- ARGV[2] limit
-- Returns: {slot_ms, run JSON, slot_ms, run JSON, ...}

local slots
if ARGV[1] == 'unfinished' then
  slots = redis.call('ZRANGE', K.running, 0, -1)
else
  local limit = tonumber(ARGV[2])
  if limit <= 0 then
    return {}
  end
  slots = redis.call('ZREVRANGE', K.slots, 0, limit - 1)
end
local reply = {}
for _, slot in ipairs(slots) do
  reply[#reply + 1] = slot
  reply[#reply + 1] = redis.call('HGET', K.runs, slot)
end
return reply
