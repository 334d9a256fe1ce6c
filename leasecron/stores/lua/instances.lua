-- instances.lua: the instances' announcements (instances in the store), across
-- jobs, so that Store.instances is one round trip. Its keys share a hash tag
-- of their own, {:instances}, which no job's tag can be (a job's is its name
-- quoted, never with a colon). No rule of the lease reads them. common.lua is
-- not prepended: this script takes no job's keys.
-- KEYS[1] <prefix>:{:instances}:bodies  hash  runner -> "<started_ms> <body>",
--                                              body the announcement's JSON
-- KEYS[2] <prefix>:{:instances}:seen    zset  member: a runner; score: when
--                                              it last announced itself
-- ARGV[1] 'read', ARGV[2] ttl_ms: returns {runner, started body, seen_ms, ...}
--         for each runner seen within ttl_ms of this server's clock
-- ARGV[1] 'announce', ARGV[2] ttl_ms, ARGV[3] runner, ARGV[4] body: forgets
--         the runners not seen within ttl_ms, then keeps the body, seen now;
--         a runner still kept keeps its started_ms, a new one starts now
-- ARGV[1] 'withdraw', ARGV[2] runner: forgets the runner

local bodies, seen, op = KEYS[1], KEYS[2], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if op == 'withdraw' then
  redis.call('HDEL', bodies, ARGV[2])
  redis.call('ZREM', seen, ARGV[2])
  return 1
end
local oldest = string.format('%d', now - tonumber(ARGV[2]))
if op == 'read' then
  local reply = {}
  local live = redis.call('ZRANGEBYSCORE', seen, oldest, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    local kept = redis.call('HGET', bodies, live[i])
    if kept then
      reply[#reply + 1] = live[i]
      reply[#reply + 1] = kept
      reply[#reply + 1] = live[i + 1]
    end
  end
  return reply
end
local gone = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. oldest)
for _, runner in ipairs(gone) do
  redis.call('HDEL', bodies, runner)
end
redis.call('ZREMRANGEBYSCORE', seen, '-inf', '(' .. oldest)
local runner, started = ARGV[3], string.format('%d', now)
local kept = redis.call('HGET', bodies, runner)
if kept then
  started = string.match(kept, '^(%d+) ') or started
end
redis.call('HSET', bodies, runner, started .. ' ' .. ARGV[4])
redis.call('ZADD', seen, string.format('%d', now), runner)
return 1
