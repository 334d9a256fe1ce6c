-- finish.lua: Store.finish, rules 14 and 20 of the store contract. Records
-- the end of the current attempt, only with the current token of a running
-- run.
-- KEYS: the job's runs, slots, running, finished (see common.lua).
-- ARGV[1] slot_ms   ARGV[2] token   ARGV[3] status ('success' or 'failed')
-- ARGV[4] error (optional: absent when there is none)
-- Returns: 1 if the run was finished, else 0.

local slot, token = ARGV[1], ARGV[2]
local run = current(slot, token)
if run == nil then -- rule 14
  return 0
end
local now = now_ms()
end_attempt(run, ARGV[3], now, ARGV[4]) -- rule 20
finish_run(slot, run, now, ARGV[3], ARGV[4])
return 1
