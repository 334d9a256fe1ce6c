-- The SQLite store's queries. Loaded by leasecron.stores.queries.
-- {table} is the runs table (checked to be a plain identifier); every value
-- is a named parameter. The claim rules themselves are in
-- leasecron/stores/rules.py; these are the reads and writes they need, run
-- inside one BEGIN IMMEDIATE transaction. The tables are created by the
-- migrations beside this file (NNNN_*.sql).

-- name: tables_found
-- Takes: runs, meta (the runs table and its _meta). Returns: the names, in
-- lower case, of those of the two tables the database holds, in any case.
SELECT lower(name) FROM sqlite_master WHERE type = 'table' AND lower(name) IN (lower(:runs), lower(:meta));

-- name: create_meta
CREATE TABLE IF NOT EXISTS {table}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

-- name: get_version
-- Returns: one row (value) once the schema is stamped.
SELECT value FROM {table}_meta WHERE key = 'schema_version';

-- name: set_version
-- Takes: version.
INSERT INTO {table}_meta (key, value) VALUES ('schema_version', :version)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: get
-- Takes: job, slot_ms. Returns: the run, or no row.
SELECT * FROM {table} WHERE job = :job AND slot_ms = :slot_ms;

-- name: newest
-- Takes: job. Returns: the run of the job's newest slot, or no row.
SELECT * FROM {table} WHERE job = :job ORDER BY slot_ms DESC LIMIT 1;

-- name: new_slot
-- Takes: job, slot_ms. Returns: one row: whether the job is paused (rule
-- 16), the slot of its newest run that a manual claim did not start (rule
-- 9; NULL if none), whether a pending request sits at slot_ms (rule 12), the
-- version of the job's stored schedule (rule 23; 0 if it never had one): what
-- a scheduled claim of a slot without a run reads, in one statement (the
-- version is one seek of the schedules' primary key).
SELECT
    EXISTS (SELECT 1 FROM {table}_pauses WHERE job = :job) AS paused,
    (SELECT slot_ms FROM {table} WHERE job = :job AND manual = 0 ORDER BY slot_ms DESC LIMIT 1) AS newest_ms,
    EXISTS (
        SELECT 1 FROM {table}_requests WHERE job = :job AND slot_ms = :slot_ms AND state = 'pending'
    ) AS requested,
    IFNULL((SELECT version FROM {table}_schedules WHERE job = :job), 0) AS schedule_version;

-- name: running
-- Takes: job. Returns: running runs, oldest first (also the overlap check and
-- the runs a new run interrupts, rules 10, 11 and 17). Left to itself SQLite
-- could scan the job's whole history by primary key; the partial index holds
-- only the running rows.
SELECT * FROM {table} INDEXED BY {table}_running WHERE job = :job AND status = 'running' ORDER BY slot_ms;

-- name: latest
-- Takes: job, limit. Returns: runs, newest slot first.
SELECT * FROM {table} WHERE job = :job ORDER BY slot_ms DESC LIMIT :limit;

-- name: recent
-- Takes: jobs (a JSON array of distinct job names), limit. Returns: the
-- newest `limit` runs of each job, by job in the array's order, newest slot
-- first: one statement (Store.recent_runs). The names are one parameter
-- (json_each), so no call comes near SQLite's limit on bound variables.
-- For each name the subquery finds the slot of its limit-th newest run (-1
-- when it has fewer: slots are never negative), and the primary key is read
-- from there on: `limit` rows a job, however long its history (a window
-- function would number every stored run of the job).
SELECT r.*
FROM json_each(:jobs) AS w
JOIN {table} AS r ON r.job = w.value
WHERE r.slot_ms >= IFNULL(
    (SELECT s.slot_ms FROM {table} AS s WHERE s.job = w.value ORDER BY s.slot_ms DESC LIMIT 1 OFFSET :limit - 1),
    -1
)
ORDER BY w.key, r.slot_ms DESC;

-- name: summaries
-- Takes: jobs (a JSON array of distinct job names). Returns: for each job
-- with stored runs, the newest finished_ms of its runs that ended success,
-- failed and interrupted (NULL: none; in the order of
-- leasecron.stored.FINISHED_STATUSES), then every column of its newest run
-- (Store.overview). One statement: an aggregate over each job's range of the
-- primary key (every run kept of it: history_size finished ones, and those
-- running), then one seek of its newest run.
WITH w(job) AS (SELECT value FROM json_each(:jobs)),
f AS (
    SELECT job, MAX(slot_ms) AS newest_ms,
        MAX(CASE status WHEN 'success' THEN finished_ms END) AS success_ms,
        MAX(CASE status WHEN 'failed' THEN finished_ms END) AS failed_ms,
        MAX(CASE status WHEN 'interrupted' THEN finished_ms END) AS interrupted_ms
    FROM {table} WHERE job IN (SELECT job FROM w) GROUP BY job
)
SELECT f.success_ms, f.failed_ms, f.interrupted_ms, r.*
FROM f JOIN {table} AS r ON r.job = f.job AND r.slot_ms = f.newest_ms;

-- name: jobs
-- Returns: the job names, sorted. A loose index scan: one seek of the primary
-- key (job, slot_ms) per job, where SELECT DISTINCT would read every stored
-- run (10,000 jobs of 100 runs: 39 ms against 98 ms).
WITH RECURSIVE names(job) AS (
    SELECT MIN(job) FROM {table}
    UNION ALL
    SELECT (SELECT MIN(job) FROM {table} WHERE job > names.job) FROM names WHERE names.job IS NOT NULL
)
SELECT job FROM names WHERE job IS NOT NULL;

-- name: insert
-- Takes: every column.
INSERT INTO {table} (
    job, slot_ms, attempt, token, runner, status, lease_end_ms,
    released, handovers, reason, error, started_ms, finished_ms, attempts, manual
) VALUES (
    :job, :slot_ms, :attempt, :token, :runner, :status, :lease_end_ms,
    :released, :handovers, :reason, :error, :started_ms, :finished_ms, :attempts, :manual
);

-- name: insert_plain
-- Takes, by position: job, slot_ms, token, runner, lease_end_ms, reason,
-- started_ms of a new run (attempt 1, running, its one attempt its own
-- fields), then the claim's version (rule 23), keep and horizon_ms (as
-- prune's). The commonest winning claim in one statement: a scheduled claim
-- of a slot without a run (rules 1-6 do not apply), whose job has no newer
-- run that a manual claim did not start (rule 9), no running run (rules 10
-- and 11 have nothing to do), no pause (rule 16), no pending request at the
-- slot (rule 12 has none to mark claimed) and no stored schedule newer than
-- the claim's version (rule 23): the run is inserted (rule 12). Returns one
-- row if it was, holding whether prune has runs to delete (rule 12); no row
-- when any of that does not hold, and the rules decide the claim step by step.
INSERT INTO {table} (
    job, slot_ms, attempt, token, runner, status, lease_end_ms,
    released, handovers, reason, error, started_ms, finished_ms, attempts, manual
)
SELECT ?1, ?2, 1, ?3, ?4, 'running', ?5, 0, 0, ?6, NULL, ?7, NULL, NULL, 0
WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE job = ?1 AND slot_ms >= ?2 AND (manual = 0 OR slot_ms = ?2))
  AND NOT EXISTS (SELECT 1 FROM {table} INDEXED BY {table}_running WHERE job = ?1 AND status = 'running')
  AND NOT EXISTS (SELECT 1 FROM {table}_pauses WHERE job = ?1)
  AND NOT EXISTS (SELECT 1 FROM {table}_requests WHERE job = ?1 AND slot_ms = ?2 AND state = 'pending')
  AND IFNULL((SELECT version FROM {table}_schedules WHERE job = ?1), 0) <= ?8
RETURNING EXISTS (
    SELECT 1 FROM (
        SELECT slot_ms FROM {table} WHERE job = ?1 AND status != 'running'
        ORDER BY slot_ms DESC LIMIT -1 OFFSET ?9
    ) WHERE slot_ms < ?10
) AS prunable;

-- name: finish_plain
-- Takes, by position: job, slot_ms, token, status, error, now_ms. The
-- commonest finish in one statement (rules 14 and 20): a running run with
-- the token whose attempts are its own fields (NULL: one attempt, never
-- released) ends, and that attempt with it. Changes no row when that does not
-- hold, and the rules decide the finish step by step.
UPDATE {table} SET status = ?4, error = ?5, finished_ms = ?6
WHERE job = ?1 AND slot_ms = ?2 AND token = ?3 AND status = 'running' AND attempts IS NULL;

-- name: renew_current
-- Takes, by position: job, slot_ms, token, lease_end_ms. A heartbeat (rule
-- 13) in one statement: the lease end of a running run with the token whose
-- lease was not released; changes no row otherwise.
UPDATE {table} SET lease_end_ms = ?4
WHERE job = ?1 AND slot_ms = ?2 AND token = ?3 AND status = 'running' AND released = 0;

-- name: update
-- Takes: every column; (job, slot_ms) names the row.
UPDATE {table} SET
    attempt = :attempt, token = :token, runner = :runner, status = :status,
    lease_end_ms = :lease_end_ms, released = :released, handovers = :handovers,
    reason = :reason, error = :error, started_ms = :started_ms, finished_ms = :finished_ms,
    attempts = :attempts
WHERE job = :job AND slot_ms = :slot_ms;

-- name: renew
-- Takes: job, slot_ms, lease_end_ms. A heartbeat's (or a retried claim's)
-- new lease end; nothing else of the run changes.
UPDATE {table} SET lease_end_ms = :lease_end_ms WHERE job = :job AND slot_ms = :slot_ms;

-- name: prune
-- Takes: job, keep, horizon_ms. Deletes finished runs beyond the newest
-- `keep` finished ones, but never the newest run nor one at or after the
-- late horizon.
DELETE FROM {table}
WHERE job = :job
  AND status != 'running'
  AND slot_ms < :horizon_ms
  AND slot_ms < (SELECT MAX(slot_ms) FROM {table} WHERE job = :job)
  AND slot_ms NOT IN (
      SELECT slot_ms FROM {table}
      WHERE job = :job AND status != 'running'
      ORDER BY slot_ms DESC LIMIT :keep
  );

-- name: get_pause
-- Takes: job. Returns: the job's pause, or no row.
SELECT job, paused_by, paused_ms, note FROM {table}_pauses WHERE job = :job;

-- name: pauses
-- Returns: the pause of every paused job.
SELECT job, paused_by, paused_ms, note FROM {table}_pauses;

-- name: set_pause
-- Takes: job, paused_by, paused_ms, note. Pauses the job, in place of a pause before.
INSERT INTO {table}_pauses (job, paused_by, paused_ms, note) VALUES (:job, :paused_by, :paused_ms, :note)
ON CONFLICT (job) DO UPDATE SET
    paused_by = excluded.paused_by, paused_ms = excluded.paused_ms, note = excluded.note;

-- name: clear_pause
-- Takes: job.
DELETE FROM {table}_pauses WHERE job = :job;

-- name: get_request
-- Takes: job, slot_ms. Returns: the request, or no row.
SELECT * FROM {table}_requests WHERE job = :job AND slot_ms = :slot_ms;

-- name: job_requests
-- Takes: job. Returns: the job's requests, oldest slot first.
SELECT * FROM {table}_requests WHERE job = :job ORDER BY slot_ms;

-- name: all_requests
-- Returns: every job's requests, by slot then job.
SELECT * FROM {table}_requests ORDER BY slot_ms, job;

-- name: pending
-- Takes: now_ms. Returns: the pending and claimed requests of every job that
-- expire at or after now_ms, oldest slot first: a range of the partial index
-- of open requests, whatever the number of runs, jobs and ended requests.
SELECT * FROM {table}_requests INDEXED BY {table}_pending
WHERE state IN ('pending', 'claimed') AND expires_ms >= :now_ms
ORDER BY slot_ms, job;

-- name: add_request
-- Takes: job, slot_ms, requested_by, expires_ms, state.
INSERT INTO {table}_requests (job, slot_ms, requested_by, expires_ms, state)
VALUES (:job, :slot_ms, :requested_by, :expires_ms, :state);

-- name: end_request
-- Takes: job, slot_ms, state. Ends the request at the slot if it is pending.
UPDATE {table}_requests SET state = :state WHERE job = :job AND slot_ms = :slot_ms AND state = 'pending';

-- name: prune_requests
-- Takes: job, keep, now_ms. Deletes the job's requests that ended (or are
-- pending past their expiry) beyond the newest `keep` of them.
DELETE FROM {table}_requests
WHERE job = :job AND slot_ms IN (
    SELECT slot_ms FROM {table}_requests
    WHERE job = :job AND (state != 'pending' OR expires_ms < :now_ms)
    ORDER BY slot_ms DESC LIMIT -1 OFFSET :keep
);

-- name: get_schedule
-- Takes: job. Returns: the job's stored schedule, or no row.
SELECT * FROM {table}_schedules WHERE job = :job;

-- name: save_schedule
-- Takes: job, version, source, schedule, tz, task, kwargs, options,
-- updated_by, updated_ms. Keeps the record as the job's stored schedule, in
-- place of any before, as the store's newest change: its cursor is one more
-- than the last change's (rule 24; MAX is the last entry of the unique index
-- of cursors, read inside the write transaction, so no two saves share one).
INSERT INTO {table}_schedules (
    job, cursor, version, source, schedule, tz, task, kwargs, options, updated_by, updated_ms
) VALUES (
    :job, (SELECT IFNULL(MAX(cursor), 0) + 1 FROM {table}_schedules), :version, :source, :schedule, :tz,
    :task, :kwargs, :options, :updated_by, :updated_ms
)
ON CONFLICT (job) DO UPDATE SET
    cursor = excluded.cursor, version = excluded.version, source = excluded.source,
    schedule = excluded.schedule, tz = excluded.tz, task = excluded.task, kwargs = excluded.kwargs,
    options = excluded.options, updated_by = excluded.updated_by, updated_ms = excluded.updated_ms;

-- name: schedule_changes
-- Takes: since (a cursor). Returns: the stored schedules saved after it,
-- oldest change first, each job's once (a save replaces the job's row): a
-- range of the index of cursors, whatever the number of jobs. The last row's
-- cursor is the newest.
SELECT * FROM {table}_schedules WHERE cursor > :since ORDER BY cursor;

-- name: instances
-- Takes: since_ms. Returns: runner, body, started_ms, seen_ms of each
-- announcement seen at or after since_ms, oldest start first.
SELECT runner, body, started_ms, seen_ms FROM {table}_instances
WHERE seen_ms >= :since_ms ORDER BY started_ms, runner;

-- name: save_instance
-- Takes: runner, body, now_ms. Keeps the announcement, seen now; a runner
-- already kept keeps its started_ms.
INSERT INTO {table}_instances (runner, body, started_ms, seen_ms)
VALUES (:runner, :body, :now_ms, :now_ms)
ON CONFLICT (runner) DO UPDATE SET body = excluded.body, seen_ms = excluded.seen_ms;

-- name: drop_instances
-- Takes: before_ms. Forgets the announcements last seen before it.
DELETE FROM {table}_instances WHERE seen_ms < :before_ms;

-- name: drop_instance
-- Takes: runner. Forgets its announcement.
DELETE FROM {table}_instances WHERE runner = :runner;
