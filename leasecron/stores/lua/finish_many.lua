-- finish_many.lua: Store.finish_many, rules 25, 14 and 20 of the store contract,
-- on Redis or Valkey outside a cluster (a cluster's batch is a pipeline of
-- finish.lua, one call per job: its jobs' keys lie on several nodes). Each
-- finish is decided as finish.lua decides it alone, one after the other in
-- the order given, each on the server's clock then: a later finish of the
-- same run finds it ended. One call, so the server runs the batch at once.
-- KEYS: for each finish, its job's runs, slots, running, finished (see
-- common.lua), four by four, in the order of the finishes.
-- ARGV: for each finish, five: slot_ms, token, status ('success' or
-- 'failed'), '1' if it has an error else '0', the error ('' when none).
-- Returns: an array, for each finish 1 if it finished its run, else 0.

local done = {}
for i = 0, #ARGV / 5 - 1 do
  K.runs, K.slots, K.running, K.finished = KEYS[4 * i + 1], KEYS[4 * i + 2], KEYS[4 * i + 3], KEYS[4 * i + 4]
  local slot, token, status = ARGV[5 * i + 1], ARGV[5 * i + 2], ARGV[5 * i + 3]
  local err = nil
  if ARGV[5 * i + 4] == '1' then
    err = ARGV[5 * i + 5]
  end
  local run = current(slot, token)
  if run == nil then -- rule 14
    done[i + 1] = 0
  else
    local now = now_ms()
    end_attempt(run, status, now, err) -- rule 20
    finish_run(slot, run, now, status, err)
    done[i + 1] = 1
  end
end
return done
