-- Migration 7 of the PostgreSQL store: the record of a handler's return on
-- its attempt (rule 26). Never edit a released migration: a change is a
-- migration of its own. Run by leasecron.stores.migrations; comment lines
-- are dropped before it runs, and {schema} and {table} are checked
-- identifiers. The table does not change: a return is three more fields of
-- an attempt's object in {table}.attempts (returned_ms, returned,
-- returned_error), which {table}_end_attempt_v3 keeps as it merges the end
-- of an attempt into it.

-- Store.record_return, rule 26: true if attempt p_attempt of the run, kept,
-- made by p_runner and without a return, got p_returned, p_status and
-- p_error; nothing else of the run changes. A run whose attempts are NULL has
-- one attempt, made of its own fields, as leasecron.stores.records reads it:
-- it is written out first.
CREATE FUNCTION {schema}.{table}_record_return_v7(
    p_job text, p_slot bigint, p_attempt bigint, p_runner text, p_returned bigint, p_status text, p_error text
) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run      {schema}.{table};
    v_attempts jsonb;
    v_index    integer;
BEGIN
    PERFORM {schema}.{table}_lock(p_job);
    SELECT * INTO v_run FROM {schema}.{table} r WHERE r.job = p_job AND r.slot_ms = p_slot;
    IF NOT FOUND THEN  -- rule 26
        RETURN false;
    END IF;
    v_attempts := coalesce(v_run.attempts, jsonb_build_array({schema}.{table}_attempt_v3(
        v_run.attempt, v_run.runner, v_run.reason, v_run.started_ms, v_run.finished_ms,
        v_run.status, v_run.error)));
    SELECT a.i - 1 INTO v_index
    FROM jsonb_array_elements(v_attempts) WITH ORDINALITY AS a(item, i)
    WHERE a.item ->> 'number' = p_attempt::text;
    IF v_index IS NULL OR (v_attempts -> v_index ->> 'runner') IS DISTINCT FROM p_runner
       OR (v_attempts -> v_index ->> 'returned') IS NOT NULL THEN  -- rule 26
        RETURN false;
    END IF;
    UPDATE {schema}.{table} r
    SET attempts = jsonb_set(v_attempts, ARRAY[v_index::text], (v_attempts -> v_index)
        || jsonb_build_object('returned_ms', p_returned, 'returned', p_status, 'returned_error', p_error))
    WHERE r.job = p_job AND r.slot_ms = p_slot;
    RETURN true;
END
$$;
