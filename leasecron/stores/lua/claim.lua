-- claim.lua: Store.claim, atomically on the server's clock, by rules 1-12 of
-- the store contract (docs/protocol.rst); each branch is tagged with its rule.
-- KEYS: the job's runs, slots, running, finished (see common.lua).
-- ARGV[1] slot_ms       the slot claimed (decimal string)
-- ARGV[2] token         the token of the attempt, if this claim wins one; the
--                       retry of the claim that won the run's current attempt
--                       (same token and runner, not released) wins it again
-- ARGV[3] runner        who claims
-- ARGV[4] reason        'schedule', 'catch-up' or 'takeover'
-- ARGV[5] lease_ms      ARGV[6] max_attempts   ARGV[7] max_late_ms
-- ARGV[8] overlap       'skip' or 'allow'
-- ARGV[9] history_size  finished runs to keep
-- ARGV[10] fresh        a new random token, for a next attempt when ARGV[2]
--                       is the token of the attempt it replaces
-- Returns: {outcome} or {outcome, slot_ms, run JSON}, outcome one of
-- won, running, overlap, late, early, done, none; a claim that stored the
-- job's first run adds a 1: {'won', slot_ms, run JSON, 1} (the caller then
-- adds the job to the jobs set, which lives on another cluster slot).

local slot = ARGV[1]
local slot_ms = tonumber(slot)
local token, runner, reason = ARGV[2], ARGV[3], ARGV[4]
local lease_ms = tonumber(ARGV[5])
local max_attempts = tonumber(ARGV[6])
local max_late_ms = tonumber(ARGV[7])
local overlap = ARGV[8]
local history_size = tonumber(ARGV[9])
local fresh = ARGV[10]
local now = now_ms()

local function won(run)
  run.token = token
  run.runner = runner
  run.reason = reason
  run.lease_end_ms = now + lease_ms
  run.released = 0
  run.started_ms = now
  return {'won', slot, save(slot, run)}
end

-- The slot already has a run.
local raw = redis.call('HGET', K.runs, slot)
if raw then
  local run = decode(raw, slot)
  if run.status ~= 'running' then -- rule 1
    return {'done', slot, raw}
  end
  if run.token == token and run.runner == runner and run.released ~= 1 then -- rule 2
    -- the retry of the claim that won this attempt (its answer was lost): renew the lease
    run.lease_end_ms = now + lease_ms
    return {'won', slot, save(slot, run)}
  end
  if run.lease_end_ms > now then -- rule 3
    return {'running', slot, raw}
  end
  local newest = newest_slot()
  if tonumber(newest) > slot_ms then -- rule 4
    return {'done', slot, finish_run(slot, run, now, 'interrupted', superseded(tonumber(newest)))}
  end
  if run.attempt - run.handovers >= max_attempts then -- rule 5
    local why = 'max_attempts (' .. int(max_attempts) .. ') used up by runners that died'
    return {'done', slot, finish_run(slot, run, now, 'interrupted', why)}
  end
  run.attempt = run.attempt + 1 -- rule 6
  if run.token == token then
    token = fresh -- a token is never given to two attempts
  end
  return won(run)
end

-- A new claim.
if reason == 'takeover' then -- rule 7
  return {'none'}
end
if slot_ms > now + EARLY_TOLERANCE_MS then -- rule 8
  return {'early'}
end
if now - slot_ms > max_late_ms + LATE_TOLERANCE_MS then -- rule 9
  return {'late'}
end
local newest = newest_slot()
if newest and tonumber(newest) > slot_ms then -- rule 9
  return {'late', newest, redis.call('HGET', K.runs, newest)}
end
-- The earlier running runs, newest first, every one read (and checked) before anything is written.
local earlier = {}
for _, at in ipairs(redis.call('ZREVRANGEBYSCORE', K.running, '(' .. slot, '-inf')) do
  earlier[#earlier + 1] = {at, load(at) or unreadable(at, 'listed as running but not stored')}
end
if overlap == 'skip' then -- rule 10
  for _, entry in ipairs(earlier) do
    if entry[2].lease_end_ms > now then
      return {'overlap', entry[1], redis.call('HGET', K.runs, entry[1])}
    end
  end
end
for _, entry in ipairs(earlier) do -- rule 11
  if entry[2].lease_end_ms <= now then
    finish_run(entry[1], entry[2], now, 'interrupted', superseded(slot_ms))
  end
end

-- rule 12
local first = redis.call('EXISTS', K.slots) == 0
local answer = won({attempt = 1, status = 'running', handovers = 0})
if first then
  answer[4] = 1
end
redis.call('ZADD', K.slots, slot, slot)
redis.call('ZADD', K.running, slot, slot)

-- Keep the newest history_size finished runs; never the job's newest run
-- (this one), a running run, or one whose slot is within the late horizon.
local horizon = now - max_late_ms - LATE_TOLERANCE_MS
for _, at in ipairs(redis.call('ZREVRANGE', K.finished, history_size, -1)) do
  if tonumber(at) < horizon and at ~= slot then
    redis.call('HDEL', K.runs, at)
    redis.call('ZREM', K.slots, at)
    redis.call('ZREM', K.finished, at)
  end
end
return answer
