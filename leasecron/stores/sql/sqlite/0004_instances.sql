-- Migration 4 of the SQLite store: version 4 of the schema: the instances'
-- announcements (instances in the store). Never edit a released migration: a
-- change is a migration of its own. Run by leasecron.stores.migrations, one
-- statement at a time; comment lines are dropped before it runs, and {table}
-- is a checked identifier.
--
-- {table}_instances: one row per started instance that announced itself:
-- body is its announcement as compact JSON (host, pid, version, the jobs it
-- registers with their code schedules, its tasks); started_ms is when the
-- runner first announced itself and seen_ms when it last did, on the store's
-- clock. A stopping instance deletes its row; an announcement deletes every
-- row not seen for 30 s (a killed instance). No rule of the lease reads it.
CREATE TABLE IF NOT EXISTS {table}_instances (
    runner      TEXT    NOT NULL PRIMARY KEY,
    body        TEXT    NOT NULL,
    started_ms  INTEGER NOT NULL,
    seen_ms     INTEGER NOT NULL
) WITHOUT ROWID;
