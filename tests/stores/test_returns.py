"""The record of a handler's return on its attempt (rule 26), against every store (the ``store`` fixture).

``record_return`` gives attempt N of a run, if it is kept and its runner is the caller, when its
handler returned and with what result, once; it changes nothing else of the run (status, outcome,
lease, token, error, ``finished_ms``): fencing is untouched.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

import pytest

from leasecron import ConfigError, Store
from leasecron.runs import Attempt, Run
from tests.stores.test_contract import JOB, LONG, SHORT, expire, kill, recent, stored, win


def without_returns(run: Run) -> Run:
    """``run`` with no return recorded on any attempt: what it was before ``record_return``."""
    plain = tuple(dataclasses.replace(a, returned_ms=None, returned=None, returned_error=None) for a in run.attempts)
    return dataclasses.replace(run, attempts=plain)


def interrupted_after_a_takeover(store: Store) -> Run:
    """A run whose attempt 1 (runner A) expired, taken over by B, then interrupted: B's lease ran
    out and a newer slot's run exists, so the next takeover claim marks it interrupted."""
    slot = recent(store, 3_000)
    first = win(store, slot, runner="A", lease_ms=SHORT)
    expire(store, first)
    second = win(store, slot, runner="B", reason="takeover", lease_ms=LONG)
    kill(store, second)
    win(store, recent(store), runner="C")
    assert store.claim(JOB, slot, runner="D", reason="takeover").outcome == "done"
    run = stored(store, JOB, slot)
    assert run.status == "interrupted" and [a.outcome for a in run.attempts] == ["expired", "expired"]
    return run


def test_an_interrupted_run_records_its_attempts_return_once_and_nothing_else(store: Store) -> None:
    """The attempt gets returned_ms, returned and returned_error; a second record answers False and
    changes nothing; the run is otherwise the same (status, error, finished_ms, lease, token)."""
    before = interrupted_after_a_takeover(store)
    returned_ms = before.attempts[0].started_ms + 40
    assert store.record_return(JOB, before.slot_ms, 1, "A", returned_ms, "success") is True
    after = stored(store, JOB, before.slot_ms)
    assert after.attempts[0] == dataclasses.replace(
        before.attempts[0], returned_ms=returned_ms, returned="success", returned_error=None
    )
    assert after.attempts[1] == before.attempts[1]
    assert without_returns(after) == before
    assert after.unshown_returns == (after.attempts[0],)
    assert store.record_return(JOB, before.slot_ms, 1, "A", returned_ms + 5, "failed", "late") is False
    assert stored(store, JOB, before.slot_ms) == after
    assert store.runs(JOB, 10)[1] == after  # the list reads it as get_run does


def test_a_failed_return_keeps_its_error_text(store: Store) -> None:
    """``returned_error`` is the failed handler's error text, as given (any Unicode)."""
    before = interrupted_after_a_takeover(store)
    error = "ValueError: the 3rd row ✓ " + "x" * 2_000
    assert store.record_return(JOB, before.slot_ms, 2, "B", 2**50, "failed", error)
    after = stored(store, JOB, before.slot_ms)
    attempt = after.attempts[1]
    assert (attempt.returned_ms, attempt.returned, attempt.returned_error) == (2**50, "failed", error)
    assert attempt.outcome == "expired" and attempt.error is None
    assert without_returns(after) == before


def test_the_current_attempt_of_a_running_run_can_carry_it_and_fencing_is_untouched(store: Store) -> None:
    """A running run's current attempt gets the return; its lease, token and status stay, so a
    heartbeat and the finish with its token still work, and the finish keeps the return."""
    slot = recent(store)
    run = win(store, slot, runner="A", lease_ms=LONG)
    returned_ms = store.now_ms()
    assert store.record_return(JOB, slot, 1, "A", returned_ms, "success")
    marked = stored(store, JOB, slot)
    assert without_returns(marked) == run
    assert marked.status == "running" and marked.attempts[0].outcome == "running"
    assert store.heartbeat(JOB, slot, run.token, LONG)
    assert store.finish(JOB, slot, run.token, "success")
    finished = stored(store, JOB, slot)
    assert finished.status == "success"
    (attempt,) = finished.attempts
    assert (attempt.outcome, attempt.returned_ms, attempt.returned) == ("success", returned_ms, "success")
    assert finished.unshown_returns == ()


def test_a_takeover_after_the_record_keeps_the_return_on_the_expired_attempt(store: Store) -> None:
    """The return recorded on a still-running attempt survives its expiry and the next attempt."""
    slot = recent(store)
    first = win(store, slot, runner="A", lease_ms=SHORT)
    assert store.record_return(JOB, slot, 1, "A", store.now_ms(), "failed", "boom")
    expire(store, first)
    second = win(store, slot, runner="B", reason="takeover", lease_ms=LONG)
    expired, current = second.attempts
    assert (expired.outcome, expired.returned, expired.returned_error) == ("expired", "failed", "boom")
    assert current.returned is None
    assert stored(store, JOB, slot).unshown_returns == (expired,)


def test_a_run_that_finished_in_one_attempt_can_carry_it(store: Store) -> None:
    """A run whose one attempt is its own fields (the stores keep no attempts then) records it too."""
    slot = recent(store)
    run = win(store, slot, runner="A")
    assert store.finish(JOB, slot, run.token, "failed", "ended")
    before = stored(store, JOB, slot)
    assert store.record_return(JOB, slot, 1, "A", before.started_ms + 1, "success")
    after = stored(store, JOB, slot)
    assert without_returns(after) == before
    assert after.attempts[0].returned == "success"
    assert after.unshown_returns == (after.attempts[0],)


def test_unknown_run_attempt_or_another_runner_is_false_and_changes_nothing(store: Store) -> None:
    """No run at the slot, no attempt of that number, or another runner's attempt: False."""
    before = interrupted_after_a_takeover(store)
    slot = before.slot_ms
    assert store.record_return(JOB, slot + 1, 1, "A", 1, "success") is False
    assert store.record_return("other-job", slot, 1, "A", 1, "success") is False
    assert store.record_return(JOB, slot, 3, "A", 1, "success") is False
    assert store.record_return(JOB, slot, 1, "B", 1, "success") is False
    assert store.record_return(JOB, slot, 2, "A", 1, "success") is False
    assert stored(store, JOB, slot) == before
    assert store.get_run(JOB, slot + 1) is None


GOOD: Dict[str, Any] = {
    "job": JOB, "slot_ms": 1_000, "attempt": 1, "runner": "A", "returned_ms": 5, "status": "success", "error": None,
}  # fmt: skip


@pytest.mark.parametrize(
    "name, value",
    [
        ("job", ""),
        ("job", 3),
        ("slot_ms", -1),
        ("slot_ms", "1"),
        ("attempt", 0),
        ("attempt", True),
        ("runner", ""),
        ("runner", None),
        ("returned_ms", -5),
        ("returned_ms", 1.5),
        ("status", "running"),
        ("status", "interrupted"),
        ("error", 42),
    ],
)
def test_bad_arguments_are_config_errors_naming_them_before_the_store_is_asked(
    store: Store, name: str, value: object
) -> None:
    """Each argument is checked as the other operations check theirs."""
    with pytest.raises(ConfigError, match=name):
        store.record_return(**{**GOOD, name: value})
    assert store.get_run(JOB, GOOD["slot_ms"]) is None


def test_the_attempts_return_is_in_its_json() -> None:
    """``to_dict`` (``--json``) holds the three fields, null when no return was recorded."""
    attempt = Attempt(1, "A", "schedule", 10, 20, "expired", None, 15, "success", None)
    assert attempt.to_dict()["returned_ms"] == 15 and attempt.to_dict()["returned"] == "success"
    assert Attempt(1, "A", "schedule", 10, None, "running").to_dict()["returned"] is None
