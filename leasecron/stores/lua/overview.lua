-- overview.lua: one job's part of Store.overview, in one call (the store
-- sends one per job in one pipeline): whether the job is paused, its newest
-- stored run, and for each status a run ends with (success, failed,
-- interrupted) the newest finished_ms among its runs that ended so, over
-- every run kept of it (history_size finished ones), not only the newest few.
-- KEYS: the job's runs, slots, running, finished, paused (see common.lua).
-- Returns: {paused (1 or 0), the newest slot, its run JSON, the newest
-- finished_ms of a success, of a failure, of an interruption}, each of the
-- last five nil (false here) when there is none; the slot and the times as
-- decimal strings.
--
-- An ended run's status and finished_ms are found in its JSON text by a
-- pattern, not by decoding it: this reads every kept run of every job at
-- each scrape of the gauges, and cjson.decode would build a table of each.
-- The patterns match the run's own fields only: cjson escapes every quote
-- inside a string (an error's text, a runner's name), so '"status":' cannot
-- appear there, and no attempt has a field of those names (an attempt's is
-- 'outcome' and 'ended_ms'). A run whose text holds no such field counts for
-- none: Python reads the newest run whole (and refuses it if tampered with).

local paused = redis.call('HEXISTS', K.paused, 'by')
local slot = newest_slot()
local newest = slot and redis.call('HGET', K.runs, slot) or false
local ends = {success = false, failed = false, interrupted = false}
for _, at in ipairs(redis.call('ZRANGE', K.finished, 0, -1)) do
  local raw = redis.call('HGET', K.runs, at)
  if raw then
    local status = string.match(raw, '"status":%s*"(%a+)"')
    local finished = tonumber(string.match(raw, '"finished_ms":%s*"?(%d+)') or '')
    local best = status and ends[status]
    if best ~= nil and finished ~= nil and (best == false or finished > best) then
      ends[status] = finished
    end
  end
end
local function shown(ms)
  return ms and int(ms) or false
end
return {paused, slot or false, newest, shown(ends.success), shown(ends.failed), shown(ends.interrupted)}
