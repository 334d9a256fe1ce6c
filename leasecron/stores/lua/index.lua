-- index.lua: the index of pending requests for manual runs, across jobs, so
-- that Store.pending_requests is one round trip whose cost grows with the
-- pending requests only (rule 19). It is one sorted set, outside every job's
-- hash tag (a job's scripts cannot write it on a cluster): the store writes
-- it after the job's script, and the job's requests hash stays the truth.
-- common.lua is not prepended: this script takes no job's keys.
-- KEYS[1] <prefix>:pending   zset  member: an open request, as the JSON text
--                            [job, slot_ms, requested_by] the store made
--                            (pending), or [job, slot_ms, requested_by,
--                            "claimed"]; score: the request's expires_ms
-- ARGV[1] 'read': returns {member, expires_ms, member, expires_ms, ...}, the
--         members whose expires_ms has not passed on this server's clock
-- ARGV[1] 'add', ARGV[2] member, ARGV[3] expires_ms: adds the member, and
--         removes those whose expires_ms has passed
-- ARGV[1] 'claim', ARGV[2] member, ARGV[3] claimed member: replaces the
--         member, if there, with the claimed one (same score)
-- ARGV[1] 'remove', ARGV[2] member: removes the member

local index, op = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if op == 'read' then
  return redis.call('ZRANGEBYSCORE', index, now, '+inf', 'WITHSCORES')
end
if op == 'add' then
  redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. now)
  redis.call('ZADD', index, ARGV[3], ARGV[2])
elseif op == 'claim' then
  local expires = redis.call('ZSCORE', index, ARGV[2])
  if expires then
    redis.call('ZREM', index, ARGV[2])
    redis.call('ZADD', index, expires, ARGV[3])
  end
else
  redis.call('ZREM', index, ARGV[2])
end
return 1
