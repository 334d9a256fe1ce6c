-- Migration 6 of the PostgreSQL store: the claim decides what a read alone
-- decides before it takes the job's lock, and returns one row, not a set.
-- Never edit a released migration: a change is a migration of its own. Run
-- by leasecron.stores.migrations; comment lines are dropped before it runs,
-- and {schema} and {table} are checked identifiers.

-- Store.claim, by rules 1-12, 16, 17, 20 and 23 of the store contract, each
-- branch tagged with its rule: {table}_claim_v4 of migration 4, but for two
-- things. A claim whose run has ended (rule 1) or runs with a live lease for
-- another claim (rule 3) is answered from one read of the run, without the
-- job's advisory lock (the others take it and decide as before, reading the
-- run again under it). And it returns its one row through OUT parameters,
-- not as a set built by RETURN QUERY: the outcome, and the run it is about
-- (NULL for none, stale, paused, early, and late by the clock or by a
-- request's time). Instances of an older release go on calling
-- {table}_claim_v4 beside it: both decide by the same rules under the same
-- lock.
CREATE FUNCTION {schema}.{table}_claim_v6(
    p_job text, p_slot bigint, p_token text, p_runner text, p_reason text,
    p_lease bigint, p_max_attempts bigint, p_max_late bigint, p_overlap text, p_keep bigint,
    p_keep_attempts bigint, p_version bigint, OUT outcome text, OUT run {schema}.{table}
)
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
    -- The run as a read finds it, before the job's lock: one that has ended,
    -- or that runs with a live lease for another claim than the one that won
    -- it, answers the claim (rules 1 and 3). The answer holds as of the read:
    -- the clock is read after the row, so a lease alive now was alive then,
    -- and an ended run stays ended. Most claims are of this kind (every
    -- instance but one claims each slot), and they wait for no lock.
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job AND r.slot_ms = p_slot;
    IF FOUND THEN
        IF v_run.status <> 'running' THEN  -- rule 1
            outcome := 'done'; run := v_run;
            RETURN;
        END IF;
        IF v_run.lease_end_ms > {schema}.{table}_now()
           AND NOT (v_run.token = p_token AND v_run.runner = p_runner AND NOT v_run.released) THEN  -- rule 3
            outcome := 'running'; run := v_run;
            RETURN;
        END IF;
    END IF;
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();

    -- The slot already has a run.
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job AND r.slot_ms = p_slot;
    IF FOUND THEN
        IF v_run.status <> 'running' THEN  -- rule 1
            outcome := 'done'; run := v_run;
            RETURN;
        END IF;
        -- rule 2 (and 20: no attempt changes)
        IF v_run.token = p_token AND v_run.runner = p_runner AND NOT v_run.released THEN  -- rule 2
            UPDATE {schema}.{table} r SET lease_end_ms = v_now + p_lease
            WHERE r.job = p_job AND r.slot_ms = p_slot
            RETURNING * INTO v_run;
            outcome := 'won'; run := v_run;
            RETURN;
        END IF;
        IF v_run.lease_end_ms > v_now THEN  -- rule 3
            outcome := 'running'; run := v_run;
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
            outcome := 'done'; run := v_run;
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
        outcome := 'won'; run := v_run;
        RETURN;
    END IF;

    -- A new claim.
    IF p_reason = 'takeover' THEN  -- rule 7
        outcome := 'none';
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
            outcome := 'none';
            RETURN;
        END IF;
        IF v_now > v_request.expires_ms THEN  -- rule 17
            UPDATE {schema}.{table}_requests q SET state = 'expired' WHERE q.job = p_job AND q.slot_ms = p_slot;
            outcome := 'late';
            RETURN;
        END IF;
        IF p_overlap = 'skip' THEN  -- rule 17
            SELECT * INTO v_run FROM {schema}.{table} r
            WHERE r.job = p_job AND r.status = 'running' AND r.lease_end_ms > v_now
            ORDER BY r.slot_ms DESC LIMIT 1;
            IF FOUND THEN
                UPDATE {schema}.{table}_requests q SET state = 'skipped' WHERE q.job = p_job AND q.slot_ms = p_slot;
                outcome := 'overlap'; run := v_run;
                RETURN;
            END IF;
        END IF;
    ELSE
        IF v_version > p_version THEN  -- rule 23
            outcome := 'stale';
            RETURN;
        END IF;
        IF v_paused THEN  -- rule 16
            outcome := 'paused';
            RETURN;
        END IF;
        IF p_slot > v_now + {EARLY_TOLERANCE_MS} THEN  -- rule 8
            outcome := 'early';
            RETURN;
        END IF;
        IF v_now - p_slot > p_max_late + {LATE_TOLERANCE_MS} THEN  -- rule 9
            outcome := 'late';
            RETURN;
        END IF;
        SELECT * INTO v_run FROM {schema}.{table} r
        WHERE r.job = p_job AND r.slot_ms > p_slot AND NOT r.manual
        ORDER BY r.slot_ms DESC LIMIT 1;
        IF FOUND THEN  -- rule 9: a newer slot has a run that no manual claim started
            outcome := 'late'; run := v_run;
            RETURN;
        END IF;
        -- rule 10: any other running run is an earlier one or a later manual one
        IF p_overlap = 'skip' THEN
            SELECT * INTO v_run FROM {schema}.{table} r
            WHERE r.job = p_job AND r.status = 'running' AND r.lease_end_ms > v_now
            ORDER BY r.slot_ms DESC LIMIT 1;
            IF FOUND THEN
                outcome := 'overlap'; run := v_run;
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
    outcome := 'won'; run := v_run;
END
$$;
