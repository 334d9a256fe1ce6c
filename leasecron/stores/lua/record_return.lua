-- record_return.lua: Store.record_return, rule 26 of the store contract.
-- Gives attempt ARGV[2] of the run, if it is kept, was made by ARGV[3] and
-- has no return recorded, its handler's return; nothing else changes.
-- KEYS: the job's runs, slots, running, finished (see common.lua).
-- ARGV[1] slot_ms   ARGV[2] attempt   ARGV[3] runner   ARGV[4] returned_ms
-- ARGV[5] status ('success' or 'failed')   ARGV[6] error (optional)
-- Returns: 1 if the return was recorded, else 0.

local slot, number, runner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local run = load(slot)
if run == nil then -- rule 26
  return 0
end
for _, attempt in ipairs(own_attempts(run)) do
  if attempt.number == number then
    if attempt.runner ~= runner or (attempt.returned ~= nil and attempt.returned ~= NULL) then -- rule 26
      return 0
    end
    attempt.returned_ms = tonumber(ARGV[4])
    attempt.returned = ARGV[5]
    attempt.returned_error = ARGV[6] or NULL
    save(slot, run)
    return 1
  end
end
return 0
