-- state.lua: Store.job_state, in one round trip: what the store holds of the
-- job beyond its runs, its pause and its requests, with the server's now (a
-- pending request whose expires_ms has passed reads as expired).
-- KEYS: the job's six keys (see common.lua).
-- Returns: the job's state, as state_reply (common.lua) gives it.

return state_reply(now_ms())
