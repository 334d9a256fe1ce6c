-- Migration 2 of the SQLite store: version 2 of the schema (leasecron 0.2):
-- the attempts of each run, and each job's pause and requests for manual
-- runs. Never edit a released migration: a change is a migration of its own.
-- Run by leasecron.stores.migrations, one statement at a time; comment lines
-- are dropped before it runs, and {table} is a checked identifier.
--
-- {table}.attempts: the run's attempts as a JSON array of objects
-- {"number", "runner", "reason", "started_ms", "ended_ms", "outcome",
-- "error"}, oldest first, the newest 20; NULL in a run stored by version 1,
-- which reads as one attempt made of the run's own fields.
-- {table}.manual: 1 when a manual claim started the run (rules 9-11 set
-- manual runs apart from the schedule).
ALTER TABLE {table} ADD COLUMN attempts TEXT;
ALTER TABLE {table} ADD COLUMN manual INTEGER NOT NULL DEFAULT 0;

-- {table}_pauses: one row per paused job (rule 18): who paused it, when on
-- the store's clock, and why. Resuming deletes the row.
CREATE TABLE IF NOT EXISTS {table}_pauses (
    job        TEXT    NOT NULL PRIMARY KEY,
    paused_by  TEXT    NOT NULL,
    paused_ms  INTEGER NOT NULL,
    note       TEXT
) WITHOUT ROWID;

-- {table}_requests: the requests for manual runs (rule 19), one per job and
-- slot; state is pending, claimed, skipped or expired. A job keeps its
-- pending requests and the newest 20 that ended.
CREATE TABLE IF NOT EXISTS {table}_requests (
    job           TEXT    NOT NULL,
    slot_ms       INTEGER NOT NULL,
    requested_by  TEXT    NOT NULL,
    expires_ms    INTEGER NOT NULL,
    state         TEXT    NOT NULL,
    PRIMARY KEY (job, slot_ms)
) WITHOUT ROWID;

-- The open requests (pending, or claimed: the run a claimed one started may
-- need a backup) for pending_requests(), which reads those not yet expired:
-- its cost grows with them alone, never with the runs, the jobs or the
-- requests skipped or expired.
CREATE INDEX IF NOT EXISTS {table}_pending ON {table}_requests (expires_ms) WHERE state IN ('pending', 'claimed');
