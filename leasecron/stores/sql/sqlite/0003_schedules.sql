-- Migration 3 of the SQLite store: version 3 of the schema: each job's
-- stored schedule (schedules as data). Never edit a released migration: a
-- change is a migration of its own. Run by leasecron.stores.migrations, one
-- statement at a time; comment lines are dropped before it runs, and {table}
-- is a checked identifier.
--
-- {table}_schedules: one row per job whose schedule was ever stored (rule
-- 24): source is override, stored or code (a reset override or a deleted
-- stored job: the row stays, so that its version keeps rising); schedule is
-- a cron string or an interval's seconds; kwargs and options are JSON
-- objects ('{}' when none); version is 1 for the job's first change, raised
-- by each; updated_by and updated_ms say who made the last change and when
-- on the store's clock. cursor: the store's count of changes when the row was
-- last saved (each save takes MAX(cursor) + 1 inside its write transaction),
-- so that a job's newest change is the only one kept.
CREATE TABLE IF NOT EXISTS {table}_schedules (
    job         TEXT    NOT NULL PRIMARY KEY,
    cursor      INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    source      TEXT    NOT NULL,
    schedule    TEXT,
    tz          TEXT,
    task        TEXT,
    kwargs      TEXT    NOT NULL,
    options     TEXT    NOT NULL,
    updated_by  TEXT    NOT NULL,
    updated_ms  INTEGER NOT NULL
) WITHOUT ROWID;

-- The changes in the order they were made: schedule_changes() reads those
-- after a cursor as a range of it, and a save finds MAX(cursor) at its end,
-- so both cost as much as the changes read, never the number of jobs.
CREATE UNIQUE INDEX IF NOT EXISTS {table}_schedule_changes ON {table}_schedules (cursor);
