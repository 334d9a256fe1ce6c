-- pause.lua: Store.pause and Store.resume, rule 18 of the store contract:
-- mark the job paused by whom, at the server's now, with a note; or clear
-- the pause. A claim reads it (claim.lua, rule 16).
-- KEYS: the job's six keys (see common.lua).
-- ARGV[1] 'pause' or 'resume'   ARGV[2] who (by)
-- ARGV[3] the pause's note (optional: absent when there is none)
-- Returns: the job's state, as state_reply (common.lua) gives it.

local now = now_ms()
redis.call('DEL', K.paused)
if ARGV[1] == 'pause' then -- rule 18: a pause replaces the one before
  redis.call('HSET', K.paused, 'by', ARGV[2], 'ms', int(now))
  if ARGV[3] then
    redis.call('HSET', K.paused, 'note', ARGV[3])
  end
end -- rule 18: resume clears it
return state_reply(now)
