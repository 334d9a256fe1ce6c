-- Migration 3 of the PostgreSQL store: pausing a job, requests for manual
-- runs, and the attempts of every run (rules 16-20 of docs/protocol.rst).
-- Never edit a released migration: a change is a migration of its own. Run
-- by leasecron.stores.migrations; comment lines are dropped before it runs,
-- {schema} and {table} are checked identifiers, and {LATE_TOLERANCE_MS} and
-- {EARLY_TOLERANCE_MS} are the constants of leasecron.runs when the
-- migration runs (a function keeps the values it was created with).
--
-- Every function that writes takes the job's advisory lock first, then reads
-- the clock ({table}_now), as the claims of migrations 1 and 2 do, and is
-- called by one statement: one round trip, one transaction. The functions of
-- migrations 1 and 2 stay as they were, for instances of 0.1 and of the
-- release before this one (they read and write the runs as before; they know
-- nothing of pauses, requests or attempts).
--
-- {table}: two columns, added without rewriting the table. attempts: the
-- run's attempts, a JSON array of objects {"number", "runner", "reason",
-- "started_ms", "ended_ms", "outcome", "error"}, oldest first, the newest
-- p_keep_attempts (MAX_ATTEMPTS_KEPT of leasecron.runs). NULL while the run's
-- only attempt is the one its own fields describe, which is how it reads
-- (leasecron.stores.records, and {table}_end_attempt_v3 here): a run stored
-- by an older function; a run a claim has just won, its attempt 1 running;
-- and that run once finish ended it (the run's status, finished_ms and error
-- are the attempt's outcome, end and error). Writing such an attempt out
-- would only repeat those fields, at a cost to every claim that wins and
-- every finish. A takeover, a release or an interruption writes them.
-- manual: a manual claim started the run (rules 9-11 set manual runs apart).
ALTER TABLE {schema}.{table}
    ADD COLUMN attempts jsonb,
    ADD COLUMN manual   boolean NOT NULL DEFAULT false;

-- {table}_jobs: the job's pause (rule 18), NULL while it is not paused: who
-- paused it, when on the store's clock, and why; and last_request_ms, the
-- newest slot a request for a manual run of the job was made for (NULL:
-- none), so that a new claim looks for a request at its slot (rule 12) only
-- when there can be one. Both are kept in the row a new claim reads anyway
-- (it counts the finished runs): checking them costs the claim nothing. A
-- job paused or asked for before it has runs gets a row; jobs() lists only
-- the jobs that have runs.
ALTER TABLE {schema}.{table}_jobs
    ADD COLUMN paused_by       text,
    ADD COLUMN paused_ms       bigint,
    ADD COLUMN note            text,
    ADD COLUMN last_request_ms bigint;

-- {table}_requests: the requests for manual runs (rule 19), one per job and
-- slot. state: pending, claimed, skipped or expired; a pending request whose
-- expires_ms has passed reads as expired. A job keeps its pending requests
-- and the newest that ended (REQUESTS_KEPT of leasecron.stores.base).
CREATE TABLE {schema}.{table}_requests (
    job          text   NOT NULL,
    slot_ms      bigint NOT NULL,
    requested_by text   NOT NULL,
    expires_ms   bigint NOT NULL,
    state        text   NOT NULL,
    PRIMARY KEY (job, slot_ms)
);
-- Every instance asks for the open requests of every job once per poll_ms
-- (pending, or claimed: the run a claimed one started may need a backup):
-- this index holds the open requests only, so that question costs what the
-- open requests not yet expired cost, whatever else is stored.
CREATE INDEX {table}_requests_pending ON {schema}.{table}_requests (expires_ms) WHERE state IN ('pending', 'claimed');

-- The helpers of the attempts below are SQL functions that the planner
-- inlines into the statements that call them (one SELECT of an expression,
-- no FROM, an argument used twice only when it is a plain value; STABLE, as
-- jsonb_build_object is): called as functions instead, they would be planned
-- anew at every statement. jsonb_build_object is slow to call, so each
-- operation builds at most one attempt.
--
-- One attempt as {table}.attempts holds it.
CREATE FUNCTION {schema}.{table}_attempt_v3(
    p_number bigint, p_runner text, p_reason text, p_started bigint, p_ended bigint, p_outcome text, p_error text
) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('number', p_number, 'runner', p_runner, 'reason', p_reason,
                              'started_ms', p_started, 'ended_ms', p_ended, 'outcome', p_outcome, 'error', p_error)
$$;

-- The attempts of run r with its current attempt ended: its outcome, end and
-- error set. A run whose attempts are NULL has one attempt, made of its own
-- fields, as leasecron.stores.records reads it. Unchanged when the last
-- attempt stored is another one (an older function won the current attempt
-- without recording it), as leasecron.stores.records does.
CREATE FUNCTION {schema}.{table}_end_attempt_v3(r {schema}.{table}, p_outcome text, p_ended bigint, p_error text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN r.attempts IS NULL THEN jsonb_build_array({schema}.{table}_attempt_v3(
            r.attempt, r.runner, r.reason, r.started_ms, p_ended, p_outcome, p_error))
        WHEN r.attempts -> -1 ->> 'number' = r.attempt::text THEN jsonb_set(r.attempts, '{-1}',
            (r.attempts -> -1) || jsonb_build_object('ended_ms', p_ended, 'outcome', p_outcome, 'error', p_error))
        ELSE r.attempts END
$$;

-- The attempts of run r once its lease is over (a next attempt takes over,
-- or the run is interrupted): the current attempt ended as handed_over if it
-- was released (as {table}_release_v3 recorded it already), else as expired,
-- at its lease end.
CREATE FUNCTION {schema}.{table}_lapsed_v3(r {schema}.{table}) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT {schema}.{table}_end_attempt_v3(r,
        CASE WHEN r.released THEN 'handed_over' ELSE 'expired' END, r.lease_end_ms, NULL)
$$;

-- p_attempts followed by p_attempt, of which the newest p_keep.
CREATE FUNCTION {schema}.{table}_add_attempt_v3(p_attempts jsonb, p_attempt jsonb, p_keep bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_path_query_array(p_attempts || jsonb_build_array(p_attempt), '$[last - $keep + 1 to last]',
                                  jsonb_build_object('keep', p_keep))
$$;

-- Store.claim, by rules 1-12, 16, 17 and 20 of the store contract, each
-- branch tagged with its rule. Returns one row: the outcome, and the run it is
-- about (NULL for none, paused, early, and late by the clock or by a request's
-- time). p_token is the token of an attempt the claim wins; p_keep_attempts
-- how many attempts a run keeps. Rule 16 reads the pause from the job's row
-- of {table}_jobs, which a new claim reads anyway; a claim of a slot that has
-- a run never looks at it.
CREATE FUNCTION {schema}.{table}_claim_v3(
    p_job text, p_slot bigint, p_token text, p_runner text, p_reason text,
    p_lease bigint, p_max_attempts bigint, p_max_late bigint, p_overlap text, p_keep bigint,
    p_keep_attempts bigint
) RETURNS TABLE (outcome text, run {schema}.{table})
LANGUAGE plpgsql AS $$
DECLARE
    v_now      bigint;
    v_run      {schema}.{table};
    v_newest   bigint;
    v_finished bigint;
    v_paused   boolean;
    v_asked    bigint;
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
        IF v_run.token = p_token AND v_run.runner = p_runner AND NOT v_run.released THEN  -- rule 2 (and 20: no attempt changes)
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
    -- The job's row: its finished runs (for pruning), its pause and the slot
    -- of its newest request. NULL when the job has no row yet.
    SELECT j.finished, j.paused_by IS NOT NULL, j.last_request_ms INTO v_finished, v_paused, v_asked
    FROM {schema}.{table}_jobs j WHERE j.job = p_job;
    IF p_reason = 'manual' THEN
        -- rule 17: in place of rules 8-10 and 16, the request at the slot
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

-- Store.finish, rule 14: true if the run was finished; rule 20: its current
-- attempt ends with the run's status and error, at now (attempts that are
-- NULL stay so: the run's own fields now say how its one attempt ended).
CREATE FUNCTION {schema}.{table}_finish_v3(
    p_job text, p_slot bigint, p_token text, p_status text, p_error text
) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();
    UPDATE {schema}.{table} r
    SET status = p_status, error = p_error, finished_ms = v_now,
        attempts = CASE WHEN r.attempts IS NOT NULL THEN {schema}.{table}_end_attempt_v3(r, p_status, v_now, p_error) END
    WHERE r.job = p_job AND r.slot_ms = p_slot AND r.token = p_token AND r.status = 'running';
    IF NOT FOUND THEN  -- rule 14
        RETURN false;
    END IF;
    UPDATE {schema}.{table}_jobs j SET finished = j.finished + 1 WHERE j.job = p_job;
    RETURN true;
END
$$;

-- Store.release, rule 15: true if the run was released; rule 20: its current
-- attempt ends as handed_over, at now.
CREATE FUNCTION {schema}.{table}_release_v3(p_job text, p_slot bigint, p_token text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();
    UPDATE {schema}.{table} r
    SET lease_end_ms = v_now, released = true, handovers = r.handovers + 1,
        attempts = {schema}.{table}_end_attempt_v3(r, 'handed_over', v_now, NULL)
    WHERE r.job = p_job AND r.slot_ms = p_slot AND r.token = p_token
      AND r.status = 'running' AND NOT r.released;  -- rule 15
    RETURN FOUND;
END
$$;

-- What the store holds of job p_job beyond its runs, at p_now: one row, its
-- pause (NULLs when not paused) and its requests kept, a JSON array of
-- [slot_ms, requested_by, expires_ms, state] by slot, a pending request whose
-- time ran out read as expired.
CREATE FUNCTION {schema}.{table}_state_v3(p_job text, p_now bigint)
RETURNS TABLE (paused_by text, paused_ms bigint, note text, requests jsonb)
LANGUAGE sql STABLE AS $$
    SELECT j.paused_by, j.paused_ms, j.note, (
        SELECT coalesce(jsonb_agg(jsonb_build_array(q.slot_ms, q.requested_by, q.expires_ms,
            CASE WHEN q.state = 'pending' AND p_now > q.expires_ms THEN 'expired' ELSE q.state END)
            ORDER BY q.slot_ms), '[]'::jsonb)
        FROM {schema}.{table}_requests q WHERE q.job = p_job
    )
    FROM (SELECT 1) one LEFT JOIN {schema}.{table}_jobs j ON j.job = p_job
$$;

-- Store.pause and Store.resume, rule 18. With p_by (pause): the job is
-- paused by p_by, at now, with p_note, in place of any pause before. With
-- p_by NULL (resume): its pause is cleared; a job not paused is left as it
-- is. Returns the job's state ({table}_state_v3).
CREATE FUNCTION {schema}.{table}_pause_v3(p_job text, p_by text, p_note text)
RETURNS TABLE (paused_by text, paused_ms bigint, note text, requests jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now bigint;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();
    IF p_by IS NOT NULL THEN  -- rule 18: pause
        INSERT INTO {schema}.{table}_jobs AS j (job, finished, paused_by, paused_ms, note)
        VALUES (p_job, 0, p_by, v_now, p_note)
        ON CONFLICT (job) DO UPDATE
        SET paused_by = excluded.paused_by, paused_ms = excluded.paused_ms, note = excluded.note;
    ELSE  -- rule 18: resume
        UPDATE {schema}.{table}_jobs j SET paused_by = NULL, paused_ms = NULL, note = NULL
        WHERE j.job = p_job AND j.paused_by IS NOT NULL;
    END IF;
    RETURN QUERY SELECT * FROM {schema}.{table}_state_v3(p_job, v_now);
END
$$;

-- Store.request_run, rule 19: a pending request for a manual run at now, or
-- at the first millisecond after it at which the job has neither a run nor a
-- request, expiring p_max_late + {LATE_TOLERANCE_MS} ms after now. The job's
-- requests that ended (claimed, skipped, expired, or pending with their time
-- run out: they read as expired, and a manual claim still finds them and
-- marks them so) beyond the newest p_keep are deleted. Returns one row: the
-- request's slot and expiry.
CREATE FUNCTION {schema}.{table}_request_run_v3(p_job text, p_by text, p_max_late bigint, p_keep bigint)
RETURNS TABLE (slot_ms bigint, expires_ms bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now  bigint;
    v_slot bigint;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    v_now := {schema}.{table}_now();
    v_slot := v_now;
    WHILE EXISTS (SELECT 1 FROM {schema}.{table} r WHERE r.job = p_job AND r.slot_ms = v_slot)
       OR EXISTS (SELECT 1 FROM {schema}.{table}_requests q WHERE q.job = p_job AND q.slot_ms = v_slot) LOOP  -- rule 19
        v_slot := v_slot + 1;
    END LOOP;
    INSERT INTO {schema}.{table}_requests (job, slot_ms, requested_by, expires_ms, state)
    VALUES (p_job, v_slot, p_by, v_now + p_max_late + {LATE_TOLERANCE_MS}, 'pending');
    INSERT INTO {schema}.{table}_jobs AS j (job, finished, last_request_ms) VALUES (p_job, 0, v_slot)
    ON CONFLICT (job) DO UPDATE SET last_request_ms = greatest(j.last_request_ms, excluded.last_request_ms);
    DELETE FROM {schema}.{table}_requests q
    WHERE q.job = p_job AND q.slot_ms IN (
        SELECT e.slot_ms FROM {schema}.{table}_requests e
        WHERE e.job = p_job AND (e.state <> 'pending' OR e.expires_ms < v_now)
        ORDER BY e.slot_ms DESC OFFSET p_keep
    );  -- rule 19
    RETURN QUERY SELECT v_slot, v_now + p_max_late + {LATE_TOLERANCE_MS};
END
$$;
