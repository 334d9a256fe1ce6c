-- common.lua: the helpers every leasecron script shares. The store prepends
-- this file to each script before loading it, so each script stays one
-- self-contained EVALSHA, and renders in the numbers of the protocol from
-- their Python constants (leasecron.runs): {LATE_TOLERANCE_MS} and the like.
--
-- Every script takes the same four keys, one job's (they share one hash tag,
-- so they live in one cluster slot):
--   KEYS[1] runs      hash   slot_ms -> the run, as a JSON object
--   KEYS[2] slots     zset   every stored slot of the job, score = slot_ms
--   KEYS[3] running   zset   the slots whose run is running
--   KEYS[4] finished  zset   the slots whose run ended
--
-- A run's integers are kept in its JSON as decimal strings, written with
-- string.format('%d'): cjson (and Lua's tostring) print only 14 significant
-- digits, too few for the 2**50 bound of the store contract.

local INTEGERS = {'attempt', 'lease_end_ms', 'released', 'handovers', 'started_ms', 'finished_ms'}
local K = {runs = KEYS[1], slots = KEYS[2], running = KEYS[3], finished = KEYS[4]}
local LATE_TOLERANCE_MS = {LATE_TOLERANCE_MS}
local EARLY_TOLERANCE_MS = {EARLY_TOLERANCE_MS}

local function int(n)
  return string.format('%d', n)
end

-- The server's clock in epoch milliseconds: every lease comparison uses it.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The fields every stored run has, and their Lua types once decoded.
local REQUIRED = {attempt = 'number', lease_end_ms = 'number', handovers = 'number', started_ms = 'number',
  status = 'string', token = 'string'}

-- Refuse to act on a run whose stored JSON was tampered with or is corrupt:
-- the script stops with an error reply naming the slot, before it writes
-- anything.
local function unreadable(slot, why)
  error({err = 'ERR leasecron: the stored run at slot ' .. tostring(slot) .. ' is unreadable: ' .. why})
end

-- A stored run's JSON as a table, with its integers as numbers.
local function decode(raw, slot)
  local ok, run = pcall(cjson.decode, raw)
  if not ok or type(run) ~= 'table' then
    unreadable(slot, 'not a JSON object')
  end
  for _, field in ipairs(INTEGERS) do
    if run[field] ~= nil then
      run[field] = tonumber(run[field])
    end
  end
  for field, kind in pairs(REQUIRED) do
    if type(run[field]) ~= kind then
      unreadable(slot, field .. ' is missing or not a ' .. kind)
    end
  end
  return run
end

-- The run stored at `slot` (a decimal string), or nil.
local function load(slot)
  local raw = redis.call('HGET', K.runs, slot)
  return raw and decode(raw, slot) or nil
end

-- Store `run` at `slot`; returns the JSON written.
local function save(slot, run)
  local stored = {}
  for field, value in pairs(run) do
    stored[field] = value
  end
  for _, field in ipairs(INTEGERS) do
    if run[field] ~= nil then
      stored[field] = int(run[field])
    end
  end
  local raw = cjson.encode(stored)
  redis.call('HSET', K.runs, slot, raw)
  return raw
end

-- An epoch-ms time as Python's datetime.isoformat() prints it in UTC, for
-- the messages of interrupted runs (days to civil date: H. Hinnant).
local function iso(ms)
  local secs = math.floor(ms / 1000)
  local millis = ms - secs * 1000
  local days = math.floor(secs / 86400)
  local rest = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400
  if month <= 2 then
    year = year + 1
  end
  local text = string.format('%04d-%02d-%02dT%02d:%02d:%02d', year, month, day,
    math.floor(rest / 3600), math.floor((rest % 3600) / 60), rest % 60)
  if millis > 0 then
    text = text .. string.format('.%06d', millis * 1000)
  end
  return text .. '+00:00'
end

local function superseded(slot_ms)
  return 'superseded: slot ' .. iso(slot_ms) .. ' started first'
end

-- End a running run as `status` (its slot moves from running to finished).
local function finish_run(slot, run, now, status, err)
  run.status = status
  run.error = err
  run.finished_ms = now
  redis.call('ZREM', K.running, slot)
  redis.call('ZADD', K.finished, slot, slot)
  return save(slot, run)
end

-- The run stored at `slot` if it is running with `token` as its current
-- token, else nil.
local function current(slot, token)
  local run = load(slot)
  if run == nil or run.status ~= 'running' or run.token ~= token then
    return nil
  end
  return run
end

-- The slot of the job's newest run (a decimal string), or nil.
local function newest_slot()
  return redis.call('ZREVRANGE', K.slots, 0, 0)[1]
end

