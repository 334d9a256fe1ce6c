-- heartbeat.lua: Store.heartbeat, rule 13 of the store contract. Moves the
-- lease end to now + lease_ms, only with the current token of a running run
-- whose lease was not released.
-- KEYS: the job's runs, slots, running, finished (see common.lua).
-- ARGV[1] slot_ms   ARGV[2] token   ARGV[3] lease_ms
-- Returns: 1 if the lease was renewed, else 0.

local slot, token = ARGV[1], ARGV[2]
local run = current(slot, token)
if run == nil or run.released == 1 then -- rule 13
  return 0
end
run.lease_end_ms = now_ms() + tonumber(ARGV[3])
save(slot, run)
return 1
