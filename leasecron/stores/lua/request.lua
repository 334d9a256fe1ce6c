-- request.lua: Store.request_run, rule 19 of the store contract. Makes a
-- request for one manual run of the job: its slot is the server's now, or
-- the first millisecond after it at which the job has neither a run nor a
-- request; it expires max_late_ms + LATE_TOLERANCE_MS after now, and is
-- pending until a claim acts on it (claim.lua, rules 12 and 17). The job's
-- requests that ended, beyond the newest REQUESTS_KEPT, are deleted; a request
-- still stored as pending whose time ran out counts as ended here (it reads as
-- expired), so that requests nobody claims do not pile up.
-- KEYS: the job's six keys (see common.lua).
-- ARGV[1] requested_by   ARGV[2] max_late_ms
-- Returns: {slot_ms, expires_ms}. The caller then adds the request to the
-- index of pending requests, which lives on another cluster slot.

local now = now_ms()
local slot = now
while redis.call('HEXISTS', K.runs, int(slot)) == 1 or redis.call('HEXISTS', K.requests, int(slot)) == 1 do -- rule 19
  slot = slot + 1
end
local expires = now + tonumber(ARGV[2]) + LATE_TOLERANCE_MS

-- rule 19: keep the pending requests and the newest REQUESTS_KEPT that ended
local ended = {}
local stored = redis.call('HGETALL', K.requests)
for i = 1, #stored, 2 do
  local request = decode_request(stored[i + 1], stored[i])
  if request.state ~= 'pending' or now > request.expires_ms then
    ended[#ended + 1] = tonumber(stored[i])
  end
end
table.sort(ended)
for i = 1, #ended - REQUESTS_KEPT do
  redis.call('HDEL', K.requests, int(ended[i]))
end

save_request(int(slot), {requested_by = ARGV[1], expires_ms = expires, state = 'pending'})
return {int(slot), int(expires)}
