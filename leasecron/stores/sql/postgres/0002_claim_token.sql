-- Migration 2 of the PostgreSQL store: the claim with a token (rule 2, the
-- retry of a claim that won). Never edit a released migration: a change is a
-- migration of its own. Run by leasecron.stores.migrations; comment lines
-- are dropped before it runs, {schema} and {table} are checked identifiers,
-- and {LATE_TOLERANCE_MS} and {EARLY_TOLERANCE_MS} are the constants of
-- leasecron.runs when the migration runs (the function keeps the values it
-- was created with: a change of them needs a migration of its own).
--
-- {table}_claim_v2 is Store.claim, by rules 1-12 of the store contract
-- (docs/protocol.rst), each branch tagged with its rule. It takes the job's
-- advisory lock, then reads the clock, so the order of the operations on a
-- job and of their clocks agree. Returns one row: the outcome, and the run it
-- is about (NULL for none, early, and late by the clock). p_token is the
-- token of an attempt the claim wins. The claim of version 1, {table}_claim,
-- stays for instances of 0.1.
CREATE FUNCTION {schema}.{table}_claim_v2(
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
        IF v_run.status <> 'running' THEN  -- rule 1
            RETURN QUERY SELECT 'done'::text, v_run;
            RETURN;
        END IF;
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
        -- rule 4 (a newer slot has a run) and rule 5 (max_attempts used up)
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
        -- rule 6
        UPDATE {schema}.{table} r
        SET attempt = r.attempt + 1,
            token = CASE WHEN r.token = p_token THEN replace(gen_random_uuid()::text, '-', '') ELSE p_token END,
            runner = p_runner, lease_end_ms = v_now + p_lease,
            released = false, reason = p_reason, started_ms = v_now
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
    IF p_slot > v_now + {EARLY_TOLERANCE_MS} THEN  -- rule 8
        RETURN QUERY SELECT 'early'::text, NULL::{schema}.{table};
        RETURN;
    END IF;
    IF v_now - p_slot > p_max_late + {LATE_TOLERANCE_MS} THEN  -- rule 9
        RETURN QUERY SELECT 'late'::text, NULL::{schema}.{table};
        RETURN;
    END IF;
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job ORDER BY r.slot_ms DESC LIMIT 1;
    IF FOUND AND v_run.slot_ms > p_slot THEN  -- rule 9
        RETURN QUERY SELECT 'late'::text, v_run;
        RETURN;
    END IF;
    IF p_overlap = 'skip' THEN  -- rule 10
        SELECT * INTO v_run FROM {schema}.{table} r
        WHERE r.job = p_job AND r.status = 'running' AND r.slot_ms < p_slot AND r.lease_end_ms > v_now
        ORDER BY r.slot_ms DESC LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT 'overlap'::text, v_run;
            RETURN;
        END IF;
    END IF;
    -- rule 11
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

    -- rule 12
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
