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

-- name: live_before
-- Takes: job, before_ms, now_ms. Returns: the newest running run with an
-- earlier slot whose lease is alive, or no row (the overlap check).
SELECT * FROM {table}
WHERE job = :job AND status = 'running' AND slot_ms < :before_ms AND lease_end_ms > :now_ms
ORDER BY slot_ms DESC LIMIT 1;

-- name: interrupt_expired
-- Takes: job, before_ms, now_ms, why. Marks interrupted the running runs with
-- an earlier slot whose lease ended: a newer run started first. Left to
-- itself SQLite scans the job's whole history by primary key (a claim took
-- 2.1 ms at history_size 10,000); the partial index holds only the running rows.
UPDATE {table} INDEXED BY {table}_running
SET status = 'interrupted', error = :why, finished_ms = :now_ms
WHERE job = :job AND status = 'running' AND slot_ms < :before_ms AND lease_end_ms <= :now_ms;

-- name: running
-- Takes: job. Returns: running runs, oldest first.
SELECT * FROM {table} INDEXED BY {table}_running WHERE job = :job AND status = 'running' ORDER BY slot_ms;

-- name: latest
-- Takes: job, limit. Returns: runs, newest slot first.
SELECT * FROM {table} WHERE job = :job ORDER BY slot_ms DESC LIMIT :limit;

-- name: jobs
-- Returns: the job names, sorted.
SELECT DISTINCT job FROM {table} ORDER BY job;

-- name: insert
-- Takes: every column.
INSERT INTO {table} (
    job, slot_ms, attempt, token, runner, status, lease_end_ms,
    released, handovers, reason, error, started_ms, finished_ms
) VALUES (
    :job, :slot_ms, :attempt, :token, :runner, :status, :lease_end_ms,
    :released, :handovers, :reason, :error, :started_ms, :finished_ms
);

-- name: update
-- Takes: every column; (job, slot_ms) names the row.
UPDATE {table} SET
    attempt = :attempt, token = :token, runner = :runner, status = :status,
    lease_end_ms = :lease_end_ms, released = :released, handovers = :handovers,
    reason = :reason, error = :error, started_ms = :started_ms, finished_ms = :finished_ms
WHERE job = :job AND slot_ms = :slot_ms;

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
