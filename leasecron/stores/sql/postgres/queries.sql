-- The PostgreSQL store's queries. Loaded by leasecron.stores.queries.
-- {schema} and {table} are checked to be plain identifiers; every value is a
-- %(name)s parameter. The lease rules themselves are the PL/pgSQL functions
-- of the migrations (NNNN_*.sql beside this file, run in order on a schema
-- stamped with an older version), so that each operation is one statement
-- and one round trip: a function runs in the statement's own transaction
-- (the connection is in autocommit mode), takes the job's advisory
-- transaction lock first, and only then reads the clock, so the order of the
-- operations on a job and of their clocks agree. (An advisory lock, unlike a
-- row lock, writes nothing: a claim that only reads commits without flushing
-- the WAL.)

-- name: schema_exists
-- Takes: schema. Returns: one row if the schema exists.
SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s;

-- name: reserved_words
-- Takes: names. Returns: those of the names PostgreSQL reserves (they cannot
-- be unquoted table or schema names).
SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T') AND word = ANY(%(names)s);

-- name: tables_found
-- Takes: schema, names. Returns: those of the names that are tables of the
-- schema (a store opened with create=False checks them).
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = ANY(%(names)s) AND c.relkind IN ('r', 'p');

-- name: create_schema
CREATE SCHEMA {schema};

-- name: lock_schema
-- Takes: name. Serialises schema creation and migration across processes
-- (a transaction-level advisory lock: no privilege needed).
SELECT pg_advisory_xact_lock(hashtext(%(name)s));

-- name: create_meta
CREATE TABLE IF NOT EXISTS {schema}.{table}_meta (key text PRIMARY KEY, value text NOT NULL);

-- name: get_version
-- Returns: one row (value) once the schema is stamped.
SELECT value FROM {schema}.{table}_meta WHERE key = 'schema_version';

-- name: set_version
-- Takes: version.
INSERT INTO {schema}.{table}_meta (key, value) VALUES ('schema_version', %(version)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: claim_prepare
-- The claim as a prepared statement of the session (the store prepares it
-- once per connection, in the same round trip as its first claim): no parse
-- or plan per claim. Takes, by position, the parameters of claim_v6.
-- Returns: one row, the outcome and only the run's columns an answer needs
-- (not its job, which the claim names, nor released, which a Run does not
-- show; manual for a brief answer; NULL when no run). The statement's name
-- names its answer's shape (a: with manual): a session that a pooler shares
-- with an older release never runs its statement of another shape.
PREPARE {schema}_{table}_claim_v6a (text, bigint, text, text, text, bigint, bigint, bigint, text, bigint, bigint, bigint) AS
SELECT c.outcome, (c.run).slot_ms, (c.run).attempt, (c.run).token, (c.run).runner, (c.run).status,
       (c.run).lease_end_ms, (c.run).handovers, (c.run).reason, (c.run).error, (c.run).started_ms,
       (c.run).finished_ms, (c.run).attempts, (c.run).manual
FROM {schema}.{table}_claim_v6($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) c;

-- name: claim_execute
-- Takes, by position: job, slot_ms, token, runner, reason, lease_ms,
-- max_attempts, max_late_ms, overlap, history_size, keep_attempts, version.
-- Returns: claim_prepare's row.
EXECUTE {schema}_{table}_claim_v6a (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: claim_many
-- Takes: jobs, slots, tokens, runners, reasons, leases, max_attempts,
-- max_lates, overlaps, histories, versions (one array each, a claim per
-- index, every token given) and keep_attempts. Returns: a row per claim, in
-- no order: its index (from 1), the outcome and the run's columns (NULL when
-- no run). One statement, so one transaction: each claim's advisory lock is
-- held until the whole batch commits. The claims run in the order of their
-- lock keys (the job's hashtext, then their index), so two batches take
-- their locks in one order and never deadlock; claims of one job keep their
-- order.
SELECT q.n, c.outcome, (c.run).*
FROM (
    SELECT *
    FROM unnest(%(jobs)s::text[], %(slots)s::bigint[], %(tokens)s::text[], %(runners)s::text[],
                %(reasons)s::text[], %(leases)s::bigint[], %(max_attempts)s::bigint[], %(max_lates)s::bigint[],
                %(overlaps)s::text[], %(histories)s::bigint[], %(versions)s::bigint[])
         WITH ORDINALITY AS u(job, slot_ms, token, runner, reason, lease_ms, max_attempts, max_late_ms, overlap,
                              history_size, version, n)
    ORDER BY hashtext(u.job), u.n
) q
CROSS JOIN LATERAL {schema}.{table}_claim_v6(q.job, q.slot_ms, q.token, q.runner, q.reason, q.lease_ms,
                                             q.max_attempts, q.max_late_ms, q.overlap, q.history_size,
                                             %(keep_attempts)s, q.version) c;

-- name: heartbeat
-- Takes: job, slot_ms, token, lease_ms. Returns: one boolean (rule 13).
SELECT {schema}.{table}_heartbeat(%(job)s, %(slot_ms)s, %(token)s, %(lease_ms)s);

-- name: finish
-- Takes: job, slot_ms, token, status, error. Returns: one boolean (rule 14).
SELECT {schema}.{table}_finish_v3(%(job)s, %(slot_ms)s, %(token)s, %(status)s, %(error)s);

-- name: finish_many
-- Takes: jobs, slots, tokens, statuses, errors (one array each, a finish per
-- index). Returns: a row per finish, in no order: its index (from 1) and
-- whether it finished the run (rule 25: each as finish decides it alone).
-- One statement, so one transaction; the finishes run in the order of their
-- lock keys, as claim_many's claims do (two batches never deadlock), and
-- the finishes of one job keep their order.
SELECT q.n, {schema}.{table}_finish_v3(q.job, q.slot_ms, q.token, q.status, q.error)
FROM (
    SELECT *
    FROM unnest(%(jobs)s::text[], %(slots)s::bigint[], %(tokens)s::text[], %(statuses)s::text[],
                %(errors)s::text[])
         WITH ORDINALITY AS u(job, slot_ms, token, status, error, n)
    ORDER BY hashtext(u.job), u.n
) q;

-- name: record_return
-- Takes: job, slot_ms, attempt, runner, returned_ms, status, error. Returns:
-- one boolean (rule 26).
SELECT {schema}.{table}_record_return_v7(%(job)s, %(slot_ms)s, %(attempt)s, %(runner)s, %(returned_ms)s,
                                         %(status)s, %(error)s);

-- name: release
-- Takes: job, slot_ms, token. Returns: one boolean (rule 15).
SELECT {schema}.{table}_release_v3(%(job)s, %(slot_ms)s, %(token)s);

-- name: pause
-- Takes: job, by, note. Returns: one row, the job's state (paused_by,
-- paused_ms, note, requests) once paused (rule 18).
SELECT * FROM {schema}.{table}_pause_v3(%(job)s, %(by)s, %(note)s);

-- name: resume
-- Takes: job. Returns: one row, the job's state once resumed (rule 18: the
-- pause function without who pauses).
SELECT * FROM {schema}.{table}_pause_v3(%(job)s, NULL, NULL);

-- name: request_run
-- Takes: job, by, max_late_ms, keep (REQUESTS_KEPT). Returns: one row, the
-- request's slot_ms and expires_ms (rule 19).
SELECT * FROM {schema}.{table}_request_run_v3(%(job)s, %(by)s, %(max_late_ms)s, %(keep)s);

-- name: set_schedule
-- Takes: job, by, source, schedule, tz, task, kwargs, options (the JSON text
-- of each object). Returns: one row, the record's version and updated_ms
-- (rule 24).
SELECT * FROM {schema}.{table}_set_schedule_v4(%(job)s, %(by)s, %(source)s, %(schedule)s, %(tz)s, %(task)s,
                                               %(kwargs)s::json, %(options)s::json);

-- name: stored_schedule
-- Takes: job. Returns: the job's record as a JSON object (the columns of
-- {table}_schedules), or no row.
SELECT row_to_json(s) FROM {schema}.{table}_schedules s WHERE s.job = %(job)s;

-- name: schedule_changes
-- Takes: since. Returns: one row, the newest cursor and the records saved
-- after cursor `since`, a JSON array of objects by cursor. It reads the
-- index of the cursors from `since` on: its cost grows with the changes only.
SELECT c.cursor, c.changes FROM {schema}.{table}_schedule_changes_v4(%(since)s) c;

-- name: poll
-- Takes: since. Returns: one row, what schedule_changes returns, and the
-- requests pending_requests returns as a JSON array of [job, slot_ms,
-- requested_by, expires_ms, state], in its order: one statement, so one
-- round trip and one snapshot (Store.poll).
SELECT c.cursor, c.changes, (
    SELECT coalesce(json_agg(json_build_array(q.job, q.slot_ms, q.requested_by, q.expires_ms, q.state)
                             ORDER BY q.slot_ms, q.job COLLATE "C"), '[]'::json)
    FROM {schema}.{table}_requests q
    WHERE q.state IN ('pending', 'claimed') AND q.expires_ms >= (SELECT {schema}.{table}_now())
)
FROM {schema}.{table}_schedule_changes_v4(%(since)s) c;

-- name: poll_announcing
-- Takes: since, runner, body, ttl. Returns: what poll returns, the
-- announcement kept first ({table}_announce_v5): one statement, one round trip.
SELECT c.cursor, c.changes, (
    SELECT coalesce(json_agg(json_build_array(q.job, q.slot_ms, q.requested_by, q.expires_ms, q.state)
                             ORDER BY q.slot_ms, q.job COLLATE "C"), '[]'::json)
    FROM {schema}.{table}_requests q
    WHERE q.state IN ('pending', 'claimed') AND q.expires_ms >= (SELECT {schema}.{table}_now())
)
FROM (SELECT {schema}.{table}_announce_v5(%(runner)s, %(body)s, %(ttl)s) AS announced) a
CROSS JOIN {schema}.{table}_schedule_changes_v4(%(since)s) c;

-- name: announce
-- Takes: runner, body, ttl. Returns: the store's now when it was kept.
SELECT {schema}.{table}_announce_v5(%(runner)s, %(body)s, %(ttl)s);

-- name: withdraw
-- Takes: runner. Forgets its announcement.
DELETE FROM {schema}.{table}_instances i WHERE i.runner = %(runner)s;

-- name: instances
-- Takes: ttl. Returns: runner, body, started_ms, seen_ms of each instance
-- seen within ttl of the store's clock, oldest start first.
SELECT i.runner, i.body, i.started_ms, i.seen_ms FROM {schema}.{table}_instances i
WHERE i.seen_ms >= {schema}.{table}_now() - %(ttl)s
ORDER BY i.started_ms, i.runner COLLATE "C";

-- name: job_state
-- Takes: job. Returns: one row, the job's state (paused_by, paused_ms, note,
-- requests), judged on the server's clock.
SELECT * FROM {schema}.{table}_state_v3(%(job)s, {schema}.{table}_now());

-- name: job_states
-- Returns: (job, paused_by, paused_ms, note, requests) of every job that is
-- paused or has requests kept, in code point order of the names.
SELECT k.job, s.*
FROM (SELECT j.job FROM {schema}.{table}_jobs j WHERE j.paused_by IS NOT NULL
      UNION SELECT q.job FROM {schema}.{table}_requests q) k
CROSS JOIN (SELECT {schema}.{table}_now() AS now) c
CROSS JOIN LATERAL {schema}.{table}_state_v3(k.job, c.now) s
ORDER BY k.job COLLATE "C";

-- name: pending_requests
-- Returns: (job, slot_ms, requested_by, expires_ms, state) of every request
-- pending or claimed and not expired on the server's clock, oldest slot
-- first. It reads the partial index of open requests from now on (the clock
-- is an InitPlan, computed once, so the index scan starts at it): its cost
-- grows with those requests only.
SELECT q.job, q.slot_ms, q.requested_by, q.expires_ms, q.state
FROM {schema}.{table}_requests q
WHERE q.state IN ('pending', 'claimed') AND q.expires_ms >= (SELECT {schema}.{table}_now())
ORDER BY q.slot_ms, q.job COLLATE "C";

-- name: now
-- Returns: the server's clock, epoch ms.
SELECT {schema}.{table}_now();

-- name: durability
-- Returns: (name, setting) of the settings that decide whether a commit
-- survives a crash.
SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit');

-- name: replication
-- Returns: one row: the address and port of the server this session reached
-- (NULLs over a Unix socket), synchronous_standby_names and synchronous_commit
-- as the session sees them, and its standbys from pg_stat_replication as a
-- JSON array of [application_name, client address, state, sync_state, replay
-- lag in ms] (NULLs where the role may not see them).
SELECT host(inet_server_addr()), inet_server_port(),
       current_setting('synchronous_standby_names'), current_setting('synchronous_commit'),
       (SELECT coalesce(jsonb_agg(jsonb_build_array(s.application_name, host(s.client_addr), s.state,
                                                    s.sync_state, extract(epoch FROM s.replay_lag) * 1000)
                                  ORDER BY s.application_name, s.pid), '[]'::jsonb)
        FROM pg_stat_replication s);

-- name: get
-- Takes: job, slot_ms. Returns: the run, or no row.
SELECT * FROM {schema}.{table} WHERE job = %(job)s AND slot_ms = %(slot_ms)s;

-- name: unfinished
-- Takes: job. Returns: the running runs, oldest slot first.
SELECT * FROM {schema}.{table} WHERE job = %(job)s AND status = 'running' ORDER BY slot_ms;

-- name: runs
-- Takes: job, limit. Returns: runs, newest slot first.
SELECT * FROM {schema}.{table} WHERE job = %(job)s ORDER BY slot_ms DESC LIMIT %(limit)s;

-- name: recent_runs
-- Takes: jobs (an array of distinct job names), limit. Returns: the newest
-- `limit` runs of each job, by job in the array's order, newest slot first:
-- one statement (Store.recent_runs). Each job is a LATERAL read of the
-- primary key from its newest slot down, `limit` rows however long its
-- history.
SELECT r.*
FROM unnest(%(jobs)s::text[]) WITH ORDINALITY AS w(job, n)
CROSS JOIN LATERAL (
    SELECT * FROM {schema}.{table} t WHERE t.job = w.job ORDER BY t.slot_ms DESC LIMIT %(limit)s
) r
ORDER BY w.n, r.slot_ms DESC;

-- name: overview
-- Takes: jobs (an array of distinct job names). Returns: one row, read in one
-- statement and so in one snapshot (Store.overview): the server's clock; the
-- cursor and the records schedule_changes(0) returns; the names of the paused
-- jobs, a JSON array; and a JSON array holding, for each job of `jobs` and
-- each stored job (a record whose source is 'stored'), [job, its newest run
-- as a JSON object of its columns or null, the newest finished_ms of its runs
-- that ended success, failed and interrupted (null: none)]. Each job is an
-- aggregate over its range of the primary key (every run kept of it:
-- history_size finished ones, and those running) and one read of its newest
-- row. A schema older than version 4 is read with the reads one by one.
SELECT c.now, s.cursor, s.changes,
    (SELECT coalesce(json_agg(j.job), '[]'::json) FROM {schema}.{table}_jobs j WHERE j.paused_by IS NOT NULL),
    (SELECT coalesce(json_agg(json_build_array(n.job, r.run, f.success_ms, f.failed_ms, f.interrupted_ms)), '[]'::json)
     FROM (SELECT w.job FROM unnest(%(jobs)s::text[]) AS w(job)
           UNION SELECT x ->> 'job' FROM json_array_elements(s.changes) x WHERE x ->> 'source' = 'stored') n
     CROSS JOIN LATERAL (
         SELECT max(t.finished_ms) FILTER (WHERE t.status = 'success') AS success_ms,
                max(t.finished_ms) FILTER (WHERE t.status = 'failed') AS failed_ms,
                max(t.finished_ms) FILTER (WHERE t.status = 'interrupted') AS interrupted_ms
         FROM {schema}.{table} t WHERE t.job = n.job
     ) f
     LEFT JOIN LATERAL (
         SELECT to_json(t) AS run FROM {schema}.{table} t WHERE t.job = n.job ORDER BY t.slot_ms DESC LIMIT 1
     ) r ON true)
FROM (SELECT {schema}.{table}_now() AS now) c
CROSS JOIN {schema}.{table}_schedule_changes_v4(0) s;

-- name: jobs
-- Returns: the names of the jobs with stored runs, in code point order (a
-- job paused before it ran has a row in {table}_jobs, and no run).
SELECT j.job FROM {schema}.{table}_jobs j
WHERE EXISTS (SELECT 1 FROM {schema}.{table} r WHERE r.job = j.job)
ORDER BY j.job COLLATE "C";
