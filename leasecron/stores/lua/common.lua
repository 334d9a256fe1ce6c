-- common.lua: the helpers every leasecron script shares. The store prepends
-- this file to each script before loading it, so each script stays one
-- self-contained EVALSHA, and renders in the numbers of the protocol from
-- their Python constants (leasecron.runs, leasecron.stores.base):
-- {LATE_TOLERANCE_MS} and the like.
--
-- Every script takes one job's keys (they share one hash tag, so they live in
-- one cluster slot); the runs' scripts take the first four, the controls' the
-- first six, claim.lua and schedule.lua all seven:
--   KEYS[1] runs      hash   slot_ms -> the run, as a JSON object
--   KEYS[2] slots     zset   every stored slot of the job, score = slot_ms
--   KEYS[3] running   zset   the slots whose run is running
--   KEYS[4] finished  zset   the slots whose run ended
--   KEYS[5] paused    hash   by, ms, note: present while the job is paused
--   KEYS[6] requests  hash   slot_ms -> a request for a manual run, as a JSON
--                            object: requested_by, expires_ms, state
--   KEYS[7] schedule  hash   the job's stored schedule (rules 23 and 24):
--                            version, ms, source, by, and those of schedule,
--                            tz, task, kwargs, options it has (kwargs and
--                            options: JSON text as Python wrote it, never
--                            decoded here); absent until its first change,
--                            so a job of 0.2 reads as version 0
--
-- A run's integers are kept in its JSON as decimal strings, written with
-- string.format('%d'): cjson (and Lua's tostring) print only 14 significant
-- digits, too few for the 2**50 bound of the store contract. So are the
-- integers of its attempts (a JSON array of objects, oldest first: number,
-- runner, reason, started_ms, ended_ms, outcome, error, and returned_ms,
-- returned, returned_error once a return is recorded) and of a request. A
-- stored schedule's version and ms are decimal strings too (a hash's fields
-- always are).

local K = {runs = KEYS[1], slots = KEYS[2], running = KEYS[3], finished = KEYS[4], paused = KEYS[5],
  requests = KEYS[6], schedule = KEYS[7]}
local LATE_TOLERANCE_MS = {LATE_TOLERANCE_MS}
local EARLY_TOLERANCE_MS = {EARLY_TOLERANCE_MS}
local MAX_ATTEMPTS_KEPT = {MAX_ATTEMPTS_KEPT}
local REQUESTS_KEPT = {REQUESTS_KEPT}
local NULL = cjson.null

local function int(n)
  return string.format('%d', n)
end

-- The server's clock in epoch milliseconds: every lease comparison uses it.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Refuse to act on a record whose stored JSON was tampered with or is
-- corrupt: the script stops with an error reply naming the slot, before it
-- writes anything. `what` is 'run' unless told.
local function unreadable(slot, why, what)
  error({err = 'ERR leasecron: the stored ' .. (what or 'run') .. ' at slot ' .. tostring(slot) .. ' is unreadable: '
    .. why})
end

-- A stored run's JSON as a table, with its integers (and its attempts') as
-- numbers; `attempts` is nil for a run stored without them (see save). The
-- fields are named one by one, not looped over from a table of names: such a
-- table would be made anew at every call of every script.
local function decode(raw, slot)
  local ok, run = pcall(cjson.decode, raw)
  if not ok or type(run) ~= 'table' then
    unreadable(slot, 'not a JSON object')
  end
  run.attempt = tonumber(run.attempt) -- a field the run has not stays nil
  run.lease_end_ms = tonumber(run.lease_end_ms)
  run.released = tonumber(run.released)
  run.handovers = tonumber(run.handovers)
  run.started_ms = tonumber(run.started_ms)
  run.finished_ms = tonumber(run.finished_ms)
  run.manual = tonumber(run.manual)
  -- the fields every stored run has, and their Lua types once decoded
  if type(run.attempt) ~= 'number' then unreadable(slot, 'attempt is missing or not a number') end
  if type(run.lease_end_ms) ~= 'number' then unreadable(slot, 'lease_end_ms is missing or not a number') end
  if type(run.handovers) ~= 'number' then unreadable(slot, 'handovers is missing or not a number') end
  if type(run.started_ms) ~= 'number' then unreadable(slot, 'started_ms is missing or not a number') end
  if type(run.status) ~= 'string' then unreadable(slot, 'status is missing or not a string') end
  if type(run.token) ~= 'string' then unreadable(slot, 'token is missing or not a string') end
  if run.attempts == NULL then
    run.attempts = nil
  elseif run.attempts ~= nil then
    if type(run.attempts) ~= 'table' or #run.attempts == 0 then
      unreadable(slot, 'attempts is not a list of attempts')
    end
    local integers = {'number', 'started_ms', 'ended_ms', 'returned_ms'} -- of an attempt
    for i, attempt in ipairs(run.attempts) do
      if type(attempt) ~= 'table' or type(attempt.outcome) ~= 'string' then
        unreadable(slot, 'attempts[' .. (i - 1) .. '] is not an attempt')
      end
      for _, field in ipairs(integers) do
        if attempt[field] ~= nil and attempt[field] ~= NULL then
          attempt[field] = tonumber(attempt[field]) or unreadable(slot, 'attempts[' .. (i - 1) .. '].' .. field
            .. ' is not an integer')
        end
      end
    end
  end
  return run
end

-- The run stored at `slot` (a decimal string), or nil.
local function load(slot)
  local raw = redis.call('HGET', K.runs, slot)
  return raw and decode(raw, slot) or nil
end

-- `fields` with each of its numbers as a decimal string.
local function with_int_texts(fields)
  local copy = {}
  for field, value in pairs(fields) do
    copy[field] = type(value) == 'number' and int(value) or value
  end
  return copy
end

-- Whether the run's attempts are the one attempt its own fields describe:
-- the store keeps none then, and they read back the same (most runs have one
-- attempt; every read and write of the run is then cheaper), as in
-- leasecron.stores.records.stored_attempts_json.
local function only_own_attempt(run)
  local attempts = run.attempts
  if attempts == nil or #attempts ~= 1 then
    return false
  end
  local function value(x) -- `x`, with JSON's null as nil
    if x == NULL then
      return nil
    end
    return x
  end
  local a = attempts[1]
  return (a.returned == nil or a.returned == NULL) and a.number == run.attempt and a.runner == run.runner and a.reason == run.reason
    and a.started_ms == run.started_ms and a.outcome == run.status
    and value(a.ended_ms) == value(run.finished_ms) and value(a.error) == value(run.error)
end

-- Store `run` at `slot`; returns the JSON written.
local function save(slot, run)
  local stored = with_int_texts(run)
  stored.attempts = nil
  if run.attempts ~= nil and not only_own_attempt(run) then
    stored.attempts = {}
    for i, attempt in ipairs(run.attempts) do
      stored.attempts[i] = with_int_texts(attempt)
    end
  end
  local raw = cjson.encode(stored)
  redis.call('HSET', K.runs, slot, raw)
  return raw
end

-- Record the current attempt (the run's attempt, runner, reason and start)
-- as running, after the others; keep the newest MAX_ATTEMPTS_KEPT.
local function begin_attempt(run)
  local attempts = run.attempts or {}
  attempts[#attempts + 1] = {number = run.attempt, runner = run.runner, reason = run.reason,
    started_ms = run.started_ms, ended_ms = NULL, outcome = 'running', error = NULL}
  while #attempts > MAX_ATTEMPTS_KEPT do
    table.remove(attempts, 1)
  end
  run.attempts = attempts
end

-- The run's attempts: a run stored without them (only its own, or stored
-- before attempts were recorded) gets, first, the one attempt its own fields
-- describe, as leasecron.stores.records reads it.
local function own_attempts(run)
  if run.attempts == nil then
    run.attempts = {{number = run.attempt, runner = run.runner, reason = run.reason, started_ms = run.started_ms,
      ended_ms = run.finished_ms or NULL, outcome = run.status, error = run.error or NULL}}
  end
  return run.attempts
end

-- Record how the current attempt ended: `outcome` at `ended_ms`, with `err`
-- (a return recorded on it by rule 26 stays).
local function end_attempt(run, outcome, ended_ms, err)
  local attempts = own_attempts(run)
  local last = attempts[#attempts]
  if last.number == run.attempt then
    last.outcome = outcome
    last.ended_ms = ended_ms
    last.error = err or NULL
  end
end

-- End the current attempt because its lease is over: handed_over if it was
-- released (as release recorded it already), else expired, at its lease end.
local function close_attempt(run)
  end_attempt(run, run.released == 1 and 'handed_over' or 'expired', run.lease_end_ms)
end

-- Why a run is interrupted by the run of `slot_ms` (rules 4 and 11): the
-- slot as Python's datetime.isoformat() prints it in UTC (days to civil
-- date: H. Hinnant).
local function superseded(slot_ms)
  local secs = math.floor(slot_ms / 1000)
  local millis = slot_ms - secs * 1000
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
  return 'superseded: slot ' .. text .. '+00:00 started first'
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


-- A stored request's JSON (at `slot`) as a table, with expires_ms as a number.
local function decode_request(raw, slot)
  local ok, request = pcall(cjson.decode, raw)
  if ok and type(request) == 'table' then
    request.expires_ms = tonumber(request.expires_ms)
  end
  if not ok or type(request) ~= 'table' or type(request.requested_by) ~= 'string'
      or type(request.expires_ms) ~= 'number' or type(request.state) ~= 'string' then
    unreadable(slot, 'not a JSON object of requested_by, expires_ms and state', 'request')
  end
  return request
end

-- The request for a manual run stored at `slot`, or nil.
local function load_request(slot)
  local raw = redis.call('HGET', K.requests, slot)
  return raw and decode_request(raw, slot) or nil
end

-- Store `request` at `slot`.
local function save_request(slot, request)
  redis.call('HSET', K.requests, slot, cjson.encode({requested_by = request.requested_by,
    expires_ms = int(request.expires_ms), state = request.state}))
end

-- What the store holds of the job beyond its runs, read by the store's
-- Python: {now, paused_by, paused_ms, note, slot_ms, request JSON, ...}, a
-- nil for each part of the pause the job has not.
local function state_reply(now)
  local reply = redis.call('HMGET', K.paused, 'by', 'ms', 'note')
  table.insert(reply, 1, int(now))
  for _, item in ipairs(redis.call('HGETALL', K.requests)) do
    reply[#reply + 1] = item
  end
  return reply
end
