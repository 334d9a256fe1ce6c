-- claim.lua: Store.claim, atomically on the server's clock, by rules 1-12,
-- 16, 17, 20 and 23 of the store contract (docs/protocol.rst); each branch is
-- tagged with its rule.
-- KEYS: the job's seven keys (see common.lua).
-- ARGV[1] slot_ms       the slot claimed (decimal string)
-- ARGV[2] token         the token of the attempt, if this claim wins one; the
--                       retry of the claim that won the run's current attempt
--                       (same token and runner, not released) wins it again
-- ARGV[3] runner        who claims
-- ARGV[4] reason        'schedule', 'catch-up', 'takeover' or 'manual'
-- ARGV[5] lease_ms      ARGV[6] max_attempts   ARGV[7] max_late_ms
-- ARGV[8] overlap       'skip' or 'allow'
-- ARGV[9] history_size  finished runs to keep
-- ARGV[10] version      the version of the job's stored schedule the slot was
--                       computed from (0: the code's), for rule 23
-- ARGV[11] fresh        a new random token, for a next attempt when ARGV[2]
--                       is the token of the attempt it replaces; absent when
--                       ARGV[2] is itself new (the caller gave no token)
-- Returns: {outcome, slot_ms, run JSON, first, requested_by, state, wrote},
-- or only its first three items when the others would be 0, nil, nil, 0 (most
-- claims: a shorter reply is cheaper to send and to read). outcome
-- is one of won, running, overlap, late, early, done, none, paused, stale; slot_ms
-- and run JSON are nil when the answer carries no run; first is 1 when the
-- claim stored the job's first run (the caller then adds the job to the jobs
-- set, which lives on another cluster slot), else 0; requested_by is nil, or
-- the requester of the request at ARGV[1] whose entry in the index of open
-- requests (on another cluster slot too) must change, and state its state
-- now: this claim ended it (claimed: the caller marks the entry claimed; it
-- stays until it expires, for the instances that back up its run), or a
-- manual claim found it skipped or expired (the caller removes the entry).
-- wrote is 1 when the answer rests on what this claim wrote besides a won
-- run (it marked a run interrupted, or ended a request): rule 22, the caller
-- answers it only once the replicas it waits for hold it; won always wrote.

local slot = ARGV[1]
local slot_ms = tonumber(slot)
local token, runner, reason = ARGV[2], ARGV[3], ARGV[4]
local lease_ms = tonumber(ARGV[5])
local max_attempts = tonumber(ARGV[6])
local max_late_ms = tonumber(ARGV[7])
local overlap = ARGV[8]
local history_size = tonumber(ARGV[9])
local version = tonumber(ARGV[10])
local fresh = ARGV[11]
local now = now_ms()
local first = 0
local requested_by = false
local request_state = false
local wrote = 0

local function answer(outcome, at, raw)
  if first == 0 and not requested_by and wrote == 0 then
    return {outcome, at or false, raw or false}
  end
  return {outcome, at or false, raw or false, first, requested_by, request_state, wrote}
end

-- A request a manual claim found ended: its index entry goes, unless it was
-- claimed (that entry stays until it expires).
local function found_ended(request)
  if request and request.state ~= 'claimed' then
    requested_by = request.requested_by
    request_state = request.state
  end
end

local function won(run)
  run.token = token
  run.runner = runner
  run.reason = reason
  run.lease_end_ms = now + lease_ms
  run.released = 0
  run.started_ms = now
  -- rule 20: a next attempt comes after those that ended; a new run's one
  -- attempt is the one its own fields describe, which save keeps as none
  if run.attempts ~= nil then
    begin_attempt(run)
  end
  return answer('won', slot, save(slot, run))
end

-- End the request at this slot as `state` (claimed, skipped or expired).
local function end_request(request, state)
  request.state = state
  save_request(slot, request)
  wrote = 1 -- rule 22
  requested_by = request.requested_by
  request_state = state
end

-- Mark a running run interrupted, with its current attempt (rules 4, 5, 11).
local function interrupt(at, run, why)
  wrote = 1 -- rule 22
  close_attempt(run)
  return finish_run(at, run, now, 'interrupted', why)
end

-- The slot already has a run.
local raw = redis.call('HGET', K.runs, slot)
if raw then
  local run = decode(raw, slot)
  if reason == 'manual' then -- rule 17: the run of a request that a claim acted on already
    local request = load_request(slot)
    if request and request.state ~= 'pending' then
      found_ended(request)
    end
  end
  if run.status ~= 'running' then -- rule 1
    return answer('done', slot, raw)
  end
  if run.token == token and run.runner == runner and run.released ~= 1 then -- rule 2
    -- the retry of the claim that won this attempt (its answer was lost): renew the lease
    run.lease_end_ms = now + lease_ms
    return answer('won', slot, save(slot, run))
  end
  if run.lease_end_ms > now then -- rule 3
    return answer('running', slot, raw)
  end
  local newest = newest_slot()
  if tonumber(newest) > slot_ms then -- rule 4 (rule 20: its attempt ends)
    return answer('done', slot, interrupt(slot, run, superseded(tonumber(newest))))
  end
  if run.attempt - run.handovers >= max_attempts then -- rule 5 (rule 20: its attempt ends)
    local why = 'max_attempts (' .. int(max_attempts) .. ') used up by runners that died'
    return answer('done', slot, interrupt(slot, run, why))
  end
  close_attempt(run) -- rule 20: handed_over if released, else expired
  run.attempt = run.attempt + 1 -- rule 6
  if run.token == token then -- (never so when ARGV[2] is new and ARGV[11] absent)
    token = fresh -- a token is never given to two attempts
  end
  return won(run)
end

-- A new claim.
if reason == 'takeover' then -- rule 7
  return answer('none')
end
-- rule 23: a scheduled or catch-up claim computed from an older version of the
-- job's stored schedule (one HGET; a job never changed has no such key: 0)
local stored_version = reason ~= 'manual' and redis.call('HGET', K.schedule, 'version')
if stored_version and (tonumber(stored_version) or error({err = 'ERR leasecron: the stored schedule of the job'
    .. ' is unreadable: its version is no number'})) > version then
  return answer('stale')
end
local request = nil
local newest = nil -- the job's newest slot (nil: the job has no run), read by rule 9
-- Whether the job has a pause or requests kept: most jobs never had either,
-- and one EXISTS of both keys then spares a claim two reads.
local controlled = reason == 'manual' or redis.call('EXISTS', K.paused, K.requests) > 0
if reason == 'manual' then
  request = load_request(slot)
  if request == nil or request.state ~= 'pending' then -- rule 17
    found_ended(request)
    return answer('none')
  end
  if now > request.expires_ms then -- rule 17
    end_request(request, 'expired')
    return answer('late')
  end
else
  if controlled and redis.call('EXISTS', K.paused) == 1 then -- rule 16
    return answer('paused')
  end
  if slot_ms > now + EARLY_TOLERANCE_MS then -- rule 8
    return answer('early')
  end
  if now - slot_ms > max_late_ms + LATE_TOLERANCE_MS then -- rule 9
    return answer('late')
  end
  newest = newest_slot()
  if newest and tonumber(newest) > slot_ms then
    -- rule 9: the newest newer run that a manual claim did not start (manual runs are few)
    local offset, newer = 0, nil
    repeat
      newer = redis.call('ZREVRANGEBYSCORE', K.slots, '+inf', '(' .. slot, 'LIMIT', offset, 8)
      for _, at in ipairs(newer) do
        local stored = redis.call('HGET', K.runs, at)
        if not stored or decode(stored, at).manual ~= 1 then
          return answer('late', at, stored)
        end
      end
      offset = offset + 8
    until #newer < 8
  end
end
-- The job's other running runs, newest first, every one read (and checked) before anything is written.
local others = {}
for _, at in ipairs(redis.call('ZREVRANGE', K.running, 0, -1)) do
  others[#others + 1] = {at, load(at) or unreadable(at, 'listed as running but not stored')}
end
if overlap == 'skip' then -- rule 10 (and rule 17's overlap)
  for _, entry in ipairs(others) do
    if entry[2].lease_end_ms > now then
      if reason == 'manual' then
        end_request(request, 'skipped')
      end
      return answer('overlap', entry[1], redis.call('HGET', K.runs, entry[1]))
    end
  end
end
for _, entry in ipairs(others) do -- rule 11 (rule 20: their attempts end)
  if entry[2].lease_end_ms <= now then
    interrupt(entry[1], entry[2], superseded(slot_ms))
  end
end

-- rule 12 (rule 20: attempt 1 begins)
if reason == 'manual' then
  newest = newest_slot()
end
if newest == nil then
  first = 1
end
if reason ~= 'manual' and controlled then
  request = load_request(slot)
end
if request and request.state == 'pending' then -- rule 12: the run a request asked for
  end_request(request, now > request.expires_ms and 'expired' or 'claimed')
end
-- manual is stored only when 1 (a run without it reads as not manual, as runs of 0.1 do)
local won_answer = won({attempt = 1, status = 'running', handovers = 0, manual = reason == 'manual' and 1 or nil})
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
return won_answer
