-- release.lua: Store.release, rules 15 and 20 of the store contract. Hands
-- the run over: lease_end = now, and the hand-over is recorded so this
-- attempt does not count against max_attempts, and its attempt ends as
-- handed_over. Only with the current token of a running run not released
-- already.
-- KEYS: the job's runs, slots, running, finished (see common.lua).
-- ARGV[1] slot_ms   ARGV[2] token
-- Returns: 1 if the run was released, else 0.

local slot, token = ARGV[1], ARGV[2]
local run = current(slot, token)
if run == nil or run.released == 1 then -- rule 15
  return 0
end
run.lease_end_ms = now_ms()
run.released = 1
run.handovers = run.handovers + 1
end_attempt(run, 'handed_over', run.lease_end_ms) -- rule 20
save(slot, run)
return 1
