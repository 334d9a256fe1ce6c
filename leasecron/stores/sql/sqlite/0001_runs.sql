-- Migration 1 of the SQLite store: version 1 of the schema. Never edit a
-- released migration: a change is a migration of its own. Run by
-- leasecron.stores.migrations, one statement at a time; comment lines are
-- dropped before it runs, and {table} is a checked identifier.
--
-- {table}: one row per run (job, slot). released: the current attempt's
-- lease was released; handovers: how many attempts ended by a release.
CREATE TABLE IF NOT EXISTS {table} (
    job          TEXT    NOT NULL,
    slot_ms      INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    token        TEXT    NOT NULL,
    runner       TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    lease_end_ms INTEGER NOT NULL,
    released     INTEGER NOT NULL DEFAULT 0,
    handovers    INTEGER NOT NULL DEFAULT 0,
    reason       TEXT    NOT NULL,
    error        TEXT,
    started_ms   INTEGER NOT NULL,
    finished_ms  INTEGER,
    PRIMARY KEY (job, slot_ms)
) WITHOUT ROWID;

-- Keeps the overlap check and unfinished() to the few running rows.
CREATE INDEX IF NOT EXISTS {table}_running ON {table} (job, slot_ms) WHERE status = 'running';
