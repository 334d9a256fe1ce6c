-- Migration 1 of the PostgreSQL store: version 1 of the schema, as
-- leasecron 0.1 created it. Never edit a released migration: a change is a
-- migration of its own. Run by leasecron.stores.migrations; comment lines
-- are dropped before it runs, {schema} and {table} are checked identifiers.
--
-- Version 1: the tables, their indexes and the functions of the operations.
--
-- {table}: one row per run (job, slot). released: the current attempt's
-- lease was released; handovers: how many attempts ended by a release.
-- {table}_jobs: one row per job that has stored runs (jobs() reads it); it
-- counts the job's finished runs, so pruning costs nothing until there is
-- something to prune, however long the history.
CREATE TABLE {schema}.{table}_jobs (
    job      text   PRIMARY KEY,
    finished bigint NOT NULL DEFAULT 0
);
CREATE TABLE {schema}.{table} (
    job          text    NOT NULL,
    slot_ms      bigint  NOT NULL,
    attempt      integer NOT NULL,
    token        text    NOT NULL,
    runner       text    NOT NULL,
    status       text    NOT NULL,
    lease_end_ms bigint  NOT NULL,
    released     boolean NOT NULL DEFAULT false,
    handovers    integer NOT NULL DEFAULT 0,
    reason       text    NOT NULL,
    error        text,
    started_ms   bigint  NOT NULL,
    finished_ms  bigint,
    PRIMARY KEY (job, slot_ms)
);
-- The overlap check, the expired-run check and unfinished() read only the
-- few running rows; pruning reads the oldest finished ones.
CREATE INDEX {table}_running ON {schema}.{table} (job, slot_ms) WHERE status = 'running';
CREATE INDEX {table}_finished ON {schema}.{table} (job, slot_ms) WHERE status <> 'running';

-- The server's clock in epoch milliseconds (truncated): every lease
-- comparison uses it.
CREATE FUNCTION {schema}.{table}_now() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Serialises the operations on one job across every connection: the lock
-- is held until the calling statement's transaction ends. Keyed on this
-- table and the job, so other tables and applications are not disturbed (a
-- hash collision only makes two jobs wait for each other).
CREATE FUNCTION {schema}.{table}_lock(p_job text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(hashtext('{schema}.{table}'), hashtext(p_job))
$$;

-- An epoch-ms time as Python's datetime.isoformat() prints it in UTC.
CREATE FUNCTION {schema}.{table}_iso(p_ms bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(to_timestamp(p_ms / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN p_ms % 1000 = 0 THEN '' ELSE '.' || lpad(((p_ms % 1000) * 1000)::text, 6, '0') END
        || '+00:00'
$$;

-- Store.claim of version 1 (0.1), without rule 2: instances of 0.1 call it;
-- this release calls {table}_claim_v2 of migration 2.
-- Store.claim. Returns one row: the outcome, and the run it is about (NULL
-- for none, early, and late by the clock).
CREATE FUNCTION {schema}.{table}_claim(
    p_job text, p_slot bigint, p_token text, p_runner text, p_reason text,
    p_lease bigint, p_max_attempts bigint, p_max_late bigint, p_overlap text, p_keep bigint
) RETURNS TABLE (outcome text, run {schema}.{table})
LANGUAGE plpgsql AS $$
DECLARE
    v_now      bigint;
    v_run      {schema}.{table};
    v_newest   bigint;
    v_finished bigint;
    v_count    bigint;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();

    -- The slot already has a run.
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job AND r.slot_ms = p_slot;
    IF FOUND THEN
        IF v_run.status <> 'running' THEN
            RETURN QUERY SELECT 'done'::text, v_run;
            RETURN;
        END IF;
        IF v_run.lease_end_ms > v_now THEN
            RETURN QUERY SELECT 'running'::text, v_run;
            RETURN;
        END IF;
        SELECT max(r.slot_ms) INTO v_newest FROM {schema}.{table} r WHERE r.job = p_job;
        IF v_newest > p_slot OR v_run.attempt - v_run.handovers >= p_max_attempts THEN
            UPDATE {schema}.{table} r
            SET status = 'interrupted', finished_ms = v_now,
                error = CASE WHEN v_newest > p_slot
                    THEN 'superseded: slot ' || {schema}.{table}_iso(v_newest) || ' started first'
                    ELSE 'max_attempts (' || p_max_attempts || ') used up by runners that died' END
            WHERE r.job = p_job AND r.slot_ms = p_slot
            RETURNING * INTO v_run;
            UPDATE {schema}.{table}_jobs j SET finished = j.finished + 1 WHERE j.job = p_job;
            RETURN QUERY SELECT 'done'::text, v_run;
            RETURN;
        END IF;
        UPDATE {schema}.{table} r
        SET attempt = r.attempt + 1, token = p_token, runner = p_runner, lease_end_ms = v_now + p_lease,
            released = false, reason = p_reason, started_ms = v_now
        WHERE r.job = p_job AND r.slot_ms = p_slot
        RETURNING * INTO v_run;
        RETURN QUERY SELECT 'won'::text, v_run;
        RETURN;
    END IF;

    -- A new claim.
    IF p_reason = 'takeover' THEN
        RETURN QUERY SELECT 'none'::text, NULL::{schema}.{table};
        RETURN;
    END IF;
    IF p_slot > v_now + 10000 THEN
        RETURN QUERY SELECT 'early'::text, NULL::{schema}.{table};
        RETURN;
    END IF;
    IF v_now - p_slot > p_max_late + 10000 THEN
        RETURN QUERY SELECT 'late'::text, NULL::{schema}.{table};
        RETURN;
    END IF;
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job ORDER BY r.slot_ms DESC LIMIT 1;
    IF FOUND AND v_run.slot_ms > p_slot THEN
        RETURN QUERY SELECT 'late'::text, v_run;
        RETURN;
    END IF;
    IF p_overlap = 'skip' THEN
        SELECT * INTO v_run FROM {schema}.{table} r
        WHERE r.job = p_job AND r.status = 'running' AND r.slot_ms < p_slot AND r.lease_end_ms > v_now
        ORDER BY r.slot_ms DESC LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT 'overlap'::text, v_run;
            RETURN;
        END IF;
    END IF;
    UPDATE {schema}.{table} r
    SET status = 'interrupted', finished_ms = v_now,
        error = 'superseded: slot ' || {schema}.{table}_iso(p_slot) || ' started first'
    WHERE r.job = p_job AND r.status = 'running' AND r.slot_ms < p_slot AND r.lease_end_ms <= v_now;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    SELECT j.finished INTO v_finished FROM {schema}.{table}_jobs j WHERE j.job = p_job;
    IF NOT FOUND THEN
        INSERT INTO {schema}.{table}_jobs (job, finished) VALUES (p_job, 0);
        v_finished := 0;
    END IF;
    v_finished := v_finished + v_count;

    INSERT INTO {schema}.{table} (job, slot_ms, attempt, token, runner, status, lease_end_ms,
                                  released, handovers, reason, error, started_ms, finished_ms)
    VALUES (p_job, p_slot, 1, p_token, p_runner, 'running', v_now + p_lease,
            false, 0, p_reason, NULL, v_now, NULL)
    RETURNING * INTO v_run;

    -- Keep the newest p_keep finished runs; never the newest run (this one),
    -- a running one, or one whose slot is within the late horizon. The
    -- finished runs beyond the newest p_keep are the oldest v_finished - p_keep.
    IF v_finished > p_keep THEN
        DELETE FROM {schema}.{table} r
        WHERE r.job = p_job AND r.slot_ms IN (
            SELECT o.slot_ms FROM {schema}.{table} o
            WHERE o.job = p_job AND o.status <> 'running' AND o.slot_ms < v_now - p_max_late - 10000
            ORDER BY o.slot_ms LIMIT v_finished - p_keep
        );
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_finished := v_finished - v_count;
    END IF;
    UPDATE {schema}.{table}_jobs j SET finished = v_finished WHERE j.job = p_job AND j.finished <> v_finished;
    RETURN QUERY SELECT 'won'::text, v_run;
END
$$;

-- Store.heartbeat, rule 13: true if the lease was renewed.
CREATE FUNCTION {schema}.{table}_heartbeat(p_job text, p_slot bigint, p_token text, p_lease bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    UPDATE {schema}.{table} r SET lease_end_ms = {schema}.{table}_now() + p_lease
    WHERE r.job = p_job AND r.slot_ms = p_slot AND r.token = p_token
      AND r.status = 'running' AND NOT r.released;
    RETURN FOUND;
END
$$;

-- Store.finish, rule 14: true if the run was finished.
CREATE FUNCTION {schema}.{table}_finish(
    p_job text, p_slot bigint, p_token text, p_status text, p_error text
) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    UPDATE {schema}.{table} r
    SET status = p_status, error = p_error, finished_ms = {schema}.{table}_now()
    WHERE r.job = p_job AND r.slot_ms = p_slot AND r.token = p_token AND r.status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE {schema}.{table}_jobs j SET finished = j.finished + 1 WHERE j.job = p_job;
    RETURN true;
END
$$;

-- Store.release, rule 15: true if the run was released.
CREATE FUNCTION {schema}.{table}_release(p_job text, p_slot bigint, p_token text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    UPDATE {schema}.{table} r
    SET lease_end_ms = {schema}.{table}_now(), released = true, handovers = r.handovers + 1
    WHERE r.job = p_job AND r.slot_ms = p_slot AND r.token = p_token
      AND r.status = 'running' AND NOT r.released;
    RETURN FOUND;
END
$$;
