-- Migration 5 of the PostgreSQL store: the instances' announcements
-- (instances in the store). Never edit a released migration: a change is a
-- migration of its own. Run by leasecron.stores.migrations; comment lines
-- are dropped before it runs, and {schema} and {table} are checked
-- identifiers.
--
-- {table}_instances: one row per started instance that announced itself.
-- body: its announcement as compact JSON text (host, pid, version, the jobs
-- it registers with their code schedules, its tasks), kept as given.
-- started_ms: when the runner first announced itself; seen_ms: when it last
-- did, both on the store's clock. A stopping instance deletes its row; each
-- announcement deletes the rows not seen within the time to live it is
-- given (a killed instance's). No rule of the lease reads this table.
CREATE TABLE {schema}.{table}_instances (
    runner     text   PRIMARY KEY,
    body       text   NOT NULL,
    started_ms bigint NOT NULL,
    seen_ms    bigint NOT NULL
);

-- Keeps p_body as p_runner's announcement, seen now: a runner already kept
-- keeps its started_ms, a new one starts now; first forgets every runner not
-- seen within p_ttl. One statement calls it (alone, or before a poll).
CREATE FUNCTION {schema}.{table}_announce_v5(p_runner text, p_body text, p_ttl bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := {schema}.{table}_now();
BEGIN
    DELETE FROM {schema}.{table}_instances i WHERE i.seen_ms < v_now - p_ttl;
    INSERT INTO {schema}.{table}_instances AS i (runner, body, started_ms, seen_ms)
    VALUES (p_runner, p_body, v_now, v_now)
    ON CONFLICT (runner) DO UPDATE SET body = excluded.body, seen_ms = excluded.seen_ms;
    RETURN v_now;
END
$$;
