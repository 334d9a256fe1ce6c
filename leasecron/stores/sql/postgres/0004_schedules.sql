-- Migration 4 of the PostgreSQL store: schedules as data, each job's stored
-- schedule (rule 24) and the claim that fences the slots of a schedule it
-- replaced (rule 23). Never edit a released migration: a change is a
-- migration of its own. Run by leasecron.stores.migrations; comment lines
-- are dropped before it runs, {schema} and {table} are checked identifiers,
-- and {LATE_TOLERANCE_MS} and {EARLY_TOLERANCE_MS} are the constants of
-- leasecron.runs when the migration runs (a function keeps the values it
-- was created with).
--
-- As before, every function that writes takes the job's advisory lock
-- first, then reads the clock ({table}_now), and is called by one
-- statement: one round trip, one transaction. The functions of migrations
-- 1-3 stay as they were, for instances of older releases: they know nothing
-- of stored schedules (an instance of 0.2 claims the slots of the code's
-- schedule, as 0.1's claims know nothing of pauses).
--
-- {table}_schedules: one row per job whose schedule was ever stored (rule
-- 24). source: override, stored, or code (a reset override or a deleted
-- stored job: the row stays, so that its version keeps rising). schedule: a
-- cron string or an interval's seconds, as text. kwargs and options: JSON
-- objects ('{}' when none), of type json, which keeps the text as it was
-- given (jsonb would turn 1e300 into an integer of 301 digits, and -0.0 into
-- 0.0), so that they read back exactly as written. version: 1 for the job's
-- first change, raised by each. updated_by and updated_ms: who made the
-- last change, and when on the store's clock. cursor: the store's count of
-- changes when the row was last saved, MAX(cursor) + 1 taken under a lock
-- that every save holds until it commits (see {table}_set_schedule_v4), so
-- the cursors become visible in their order, without a gap: a reader that
-- saw cursor n has seen every change up to n. (A sequence would not do: the
-- saves would commit in another order than their numbers, and a reader
-- could pass a number whose change is not yet visible, and never see it.)
CREATE TABLE {schema}.{table}_schedules (
    job        text   PRIMARY KEY,
    cursor     bigint NOT NULL,
    version    bigint NOT NULL,
    source     text   NOT NULL,
    schedule   text,
    tz         text,
    task       text,
    kwargs     json   NOT NULL CHECK (json_typeof(kwargs) = 'object'),
    options    json   NOT NULL CHECK (json_typeof(options) = 'object'),
    updated_by text   NOT NULL,
    updated_ms bigint NOT NULL
);
-- The changes in the order they were made: schedule_changes reads those
-- after a cursor as a range of this index, and a save finds MAX(cursor) at
-- its end, so both cost what the changes read cost, never the number of jobs.
CREATE UNIQUE INDEX {table}_schedules_cursor ON {schema}.{table}_schedules (cursor);

-- {table}_jobs: schedule_version, the version of the job's stored schedule
-- (0: it never had one), a copy of {table}_schedules.version that
-- {table}_set_schedule_v4 writes in the same transaction. It sits in the row
-- a new claim reads anyway (its finished runs, its pause): checking rule 23
-- costs the claim no read of its own. Added without rewriting the table.
ALTER TABLE {schema}.{table}_jobs ADD COLUMN schedule_version bigint NOT NULL DEFAULT 0;

-- Store.set_schedule, rule 24: the job's record becomes p_source with the
-- given fields, its version one more than its last (1 for its first), stamped
-- p_by at now. Takes the job's lock (a claim of the job and a change of its
-- schedule are serialised: once this commits, every claim reads the new
-- version), then the lock of every job's schedule, in that order (no other
-- function waits for a job's lock while it holds that one, so they never
-- deadlock), which makes MAX(cursor) + 1 this change's cursor. Returns one
-- row: the record's version and updated_ms.
CREATE FUNCTION {schema}.{table}_set_schedule_v4(
    p_job text, p_by text, p_source text, p_schedule text, p_tz text, p_task text, p_kwargs json, p_options json
) RETURNS TABLE (version bigint, updated_ms bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now     bigint;
    v_version bigint;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    PERFORM pg_advisory_xact_lock(hashtext('{schema}.{table}_schedules'));  -- one key: never a job's lock
    v_now := {schema}.{table}_now();
    INSERT INTO {schema}.{table}_schedules AS s (job, cursor, version, source, schedule, tz, task,
                                                 kwargs, options, updated_by, updated_ms)
    VALUES (p_job, (SELECT coalesce(max(c.cursor), 0) + 1 FROM {schema}.{table}_schedules c), 1, p_source,
            p_schedule, p_tz, p_task, p_kwargs, p_options, p_by, v_now)
    ON CONFLICT (job) DO UPDATE
    SET cursor = excluded.cursor, version = s.version + 1, source = excluded.source,
        schedule = excluded.schedule, tz = excluded.tz, task = excluded.task, kwargs = excluded.kwargs,
        options = excluded.options, updated_by = excluded.updated_by, updated_ms = excluded.updated_ms
    RETURNING s.version INTO v_version;  -- rule 24
    INSERT INTO {schema}.{table}_jobs AS j (job, finished, schedule_version) VALUES (p_job, 0, v_version)
    ON CONFLICT (job) DO UPDATE SET schedule_version = excluded.schedule_version;  -- rule 23 reads it
    RETURN QUERY SELECT v_version, v_now;
END
$$;

-- Store.schedule_changes: one row, the newest cursor (p_since when none is
-- newer) and every record saved after cursor p_since, a JSON array of
-- objects (the columns of {table}_schedules, kwargs and options as stored)
-- by cursor: each job once, as it is now. One statement, so one snapshot:
-- the cursor and the records agree.
CREATE FUNCTION {schema}.{table}_schedule_changes_v4(p_since bigint)
RETURNS TABLE (cursor bigint, changes json)
LANGUAGE sql STABLE AS $$
    SELECT greatest(p_since, (SELECT max(c.cursor) FROM {schema}.{table}_schedules c)),
           (SELECT coalesce(json_agg(s ORDER BY s.cursor), '[]'::json)
            FROM {schema}.{table}_schedules s WHERE s.cursor > p_since)
$$;

-- Store.claim, by rules 1-12, 16, 17, 20 and 23 of the store contract, each
-- branch tagged with its rule: {table}_claim_v3 of migration 3 with
-- p_version, the version of the job's stored schedule the claim's slot was
-- computed from (0: the code's). A scheduled or catch-up claim of a slot
-- that has no run, from a version older than the job's, is answered stale
-- and writes nothing (rule 23, checked after rule 7 and before rule 16); it
-- reads the version from the job's row of {table}_jobs, which a new claim
-- reads anyway. Returns one row: the outcome, and the run it is about (NULL
-- for none, stale, paused, early, and late by the clock or by a request's
-- time).
CREATE FUNCTION {schema}.{table}_claim_v4(
    p_job text, p_slot bigint, p_token text, p_runner text, p_reason text,
    p_lease bigint, p_max_attempts bigint, p_max_late bigint, p_overlap text, p_keep bigint,
    p_keep_attempts bigint, p_version bigint
) RETURNS TABLE (outcome text, run {schema}.{table})
LANGUAGE plpgsql AS $$
DECLARE
    v_now      bigint;
    v_run      {schema}.{table};
    v_newest   bigint;
    v_finished bigint;
    v_paused   boolean;
    v_asked    bigint;
    v_version  bigint;
    v_count    bigint;
    v_request  {schema}.{table}_requests;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();

    -- The slot already has a run.
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job AND r.slot_ms = p_slot;
    IF FOUND THEN
        IF v_run.status <> 'running' THEN  -- rule 1
            RETURN QUERY SELECT 'done'::text, v_run;
            RETURN;
        END IF;
        -- rule 2 (and 20: no attempt changes)
        IF v_run.token = p_token AND v_run.runner = p_runner AND NOT v_run.released THEN  -- rule 2
            UPDATE {schema}.{table} r SET lease_end_ms = v_now + p_lease
            WHERE r.job = p_job AND r.slot_ms = p_slot
            RETURNING * INTO v_run;
            RETURN QUERY SELECT 'won'::text, v_run;
            RETURN;
        END IF;
        IF v_run.lease_end_ms > v_now THEN  -- rule 3
            RETURN QUERY SELECT 'running'::text, v_run;
            RETURN;
        END IF;
        SELECT max(r.slot_ms) INTO v_newest FROM {schema}.{table} r WHERE r.job = p_job;
        -- rule 4 (a newer slot has a run) and rule 5 (max_attempts used up);
        -- rule 20: the current attempt ends with its lease
        IF v_newest > p_slot OR v_run.attempt - v_run.handovers >= p_max_attempts THEN
            UPDATE {schema}.{table} r
            SET status = 'interrupted', finished_ms = v_now, attempts = {schema}.{table}_lapsed_v3(r),
                error = CASE WHEN v_newest > p_slot
                    THEN 'superseded: slot ' || {schema}.{table}_iso(v_newest) || ' started first'
                    ELSE 'max_attempts (' || p_max_attempts || ') used up by runners that died' END
            WHERE r.job = p_job AND r.slot_ms = p_slot
            RETURNING * INTO v_run;
            UPDATE {schema}.{table}_jobs j SET finished = j.finished + 1 WHERE j.job = p_job;
            RETURN QUERY SELECT 'done'::text, v_run;
            RETURN;
        END IF;
        -- rule 6; rule 20: the current attempt ends with its lease, the next one is recorded
        UPDATE {schema}.{table} r
        SET attempt = r.attempt + 1,
            token = CASE WHEN r.token = p_token THEN replace(gen_random_uuid()::text, '-', '') ELSE p_token END,
            runner = p_runner, lease_end_ms = v_now + p_lease,
            released = false, reason = p_reason, started_ms = v_now,
            attempts = {schema}.{table}_add_attempt_v3(
                {schema}.{table}_lapsed_v3(r),
                {schema}.{table}_attempt_v3(r.attempt + 1, p_runner, p_reason, v_now, NULL, 'running', NULL),
                p_keep_attempts)
        WHERE r.job = p_job AND r.slot_ms = p_slot
        RETURNING * INTO v_run;
        RETURN QUERY SELECT 'won'::text, v_run;
        RETURN;
    END IF;

    -- A new claim.
    IF p_reason = 'takeover' THEN  -- rule 7
        RETURN QUERY SELECT 'none'::text, NULL::{schema}.{table};
        RETURN;
    END IF;
    -- The job's row: its finished runs (for pruning), its pause, the slot of
    -- its newest request and its schedule's version. NULL when the job has
    -- no row yet.
    SELECT j.finished, j.paused_by IS NOT NULL, j.last_request_ms, j.schedule_version
    INTO v_finished, v_paused, v_asked, v_version
    FROM {schema}.{table}_jobs j WHERE j.job = p_job;
    IF p_reason = 'manual' THEN
        -- rule 17: in place of rules 8-10, 16 and 23, the request at the slot
        SELECT * INTO v_request FROM {schema}.{table}_requests q
        WHERE q.job = p_job AND q.slot_ms = p_slot AND q.state = 'pending';
        IF NOT FOUND THEN  -- rule 17
            RETURN QUERY SELECT 'none'::text, NULL::{schema}.{table};
            RETURN;
        END IF;
        IF v_now > v_request.expires_ms THEN  -- rule 17
            UPDATE {schema}.{table}_requests q SET state = 'expired' WHERE q.job = p_job AND q.slot_ms = p_slot;
            RETURN QUERY SELECT 'late'::text, NULL::{schema}.{table};
            RETURN;
        END IF;
        IF p_overlap = 'skip' THEN  -- rule 17
            SELECT * INTO v_run FROM {schema}.{table} r
            WHERE r.job = p_job AND r.status = 'running' AND r.lease_end_ms > v_now
            ORDER BY r.slot_ms DESC LIMIT 1;
            IF FOUND THEN
                UPDATE {schema}.{table}_requests q SET state = 'skipped' WHERE q.job = p_job AND q.slot_ms = p_slot;
                RETURN QUERY SELECT 'overlap'::text, v_run;
                RETURN;
            END IF;
        END IF;
    ELSE
        IF v_version > p_version THEN  -- rule 23
            RETURN QUERY SELECT 'stale'::text, NULL::{schema}.{table};
            RETURN;
        END IF;
        IF v_paused THEN  -- rule 16
            RETURN QUERY SELECT 'paused'::text, NULL::{schema}.{table};
            RETURN;
        END IF;
        IF p_slot > v_now + {EARLY_TOLERANCE_MS} THEN  -- rule 8
            RETURN QUERY SELECT 'early'::text, NULL::{schema}.{table};
            RETURN;
        END IF;
        IF v_now - p_slot > p_max_late + {LATE_TOLERANCE_MS} THEN  -- rule 9
            RETURN QUERY SELECT 'late'::text, NULL::{schema}.{table};
            RETURN;
        END IF;
        SELECT * INTO v_run FROM {schema}.{table} r
        WHERE r.job = p_job AND r.slot_ms > p_slot AND NOT r.manual
        ORDER BY r.slot_ms DESC LIMIT 1;
        IF FOUND THEN  -- rule 9: a newer slot has a run that no manual claim started
            RETURN QUERY SELECT 'late'::text, v_run;
            RETURN;
        END IF;
        -- rule 10: any other running run is an earlier one or a later manual one
        IF p_overlap = 'skip' THEN
            SELECT * INTO v_run FROM {schema}.{table} r
            WHERE r.job = p_job AND r.status = 'running' AND r.lease_end_ms > v_now
            ORDER BY r.slot_ms DESC LIMIT 1;
            IF FOUND THEN
                RETURN QUERY SELECT 'overlap'::text, v_run;
                RETURN;
            END IF;
        END IF;
    END IF;
    -- rule 11; rule 20: their current attempts end with their leases
    UPDATE {schema}.{table} r
    SET status = 'interrupted', finished_ms = v_now, attempts = {schema}.{table}_lapsed_v3(r),
        error = 'superseded: slot ' || {schema}.{table}_iso(p_slot) || ' started first'
    WHERE r.job = p_job AND r.status = 'running' AND r.lease_end_ms <= v_now;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_finished IS NULL THEN
        INSERT INTO {schema}.{table}_jobs (job, finished) VALUES (p_job, 0);
        v_finished := 0;
    END IF;
    v_finished := v_finished + v_count;

    -- rule 12; rule 20: attempt 1, running, is the one the run's fields
    -- describe (attempts NULL)
    INSERT INTO {schema}.{table} (job, slot_ms, attempt, token, runner, status, lease_end_ms,
                                  released, handovers, reason, error, started_ms, finished_ms,
                                  attempts, manual)
    VALUES (p_job, p_slot, 1, p_token, p_runner, 'running', v_now + p_lease,
            false, 0, p_reason, NULL, v_now, NULL,
            NULL, p_reason = 'manual')
    RETURNING * INTO v_run;
    IF p_slot <= v_asked THEN  -- rules 12 and 17: the request at this slot asked for this run
        UPDATE {schema}.{table}_requests q SET state = 'claimed'
        WHERE q.job = p_job AND q.slot_ms = p_slot AND q.state = 'pending';
    END IF;

    -- Keep the newest p_keep finished runs; never the newest run (this one),
    -- a running one, or one whose slot is within the late horizon. The
    -- finished runs beyond the newest p_keep are the oldest v_finished - p_keep.
    IF v_finished > p_keep THEN
        DELETE FROM {schema}.{table} r
        WHERE r.job = p_job AND r.slot_ms IN (
            SELECT o.slot_ms FROM {schema}.{table} o
            WHERE o.job = p_job AND o.status <> 'running' AND o.slot_ms < v_now - p_max_late - {LATE_TOLERANCE_MS}
            ORDER BY o.slot_ms LIMIT v_finished - p_keep
        );
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_finished := v_finished - v_count;
    END IF;
    UPDATE {schema}.{table}_jobs j SET finished = v_finished WHERE j.job = p_job AND j.finished <> v_finished;
    RETURN QUERY SELECT 'won'::text, v_run;
END
$$;
