"""The record of attempts (rule 20), against every store (the ``store`` fixture).

Every operation that changes a run records what happened to its attempts in ``Run.attempts``
(oldest first, the newest ``MAX_ATTEMPTS_KEPT``): a won run starts attempt 1; a takeover ends the
current attempt as ``expired`` at its lease end (or keeps the ``handed_over`` of a release) and
starts the next; an interruption ends a current attempt as ``expired``; ``finish`` and
``release`` end it at the store's now. A retry and a heartbeat change no attempt.
"""

from __future__ import annotations

import json
from typing import Optional

import pytest

from leasecron import Store
from leasecron.runs import MAX_ATTEMPTS_KEPT, Attempt, Run
from tests.stores.test_contract import JOB, LONG, SHORT, claim, expire, kill, recent, stored, win


def running(run: Run) -> Attempt:
    """The attempt ``run`` is on, as it is recorded while it runs."""
    return Attempt(run.attempt, run.runner, run.reason, run.started_ms, None, "running", None)


def ended(run: Run, outcome: str, ended_ms: int, error: Optional[str] = None) -> Attempt:
    """The attempt ``run`` was on, ended."""
    return Attempt(run.attempt, run.runner, run.reason, run.started_ms, ended_ms, outcome, error)


@pytest.mark.parametrize("reason", ["schedule", "catch-up", "manual"])
def test_a_won_run_records_attempt_1_running(store: Store, reason: str) -> None:
    """A won new run holds one attempt: number 1, its runner, reason and start, not ended, running."""
    if reason == "manual":
        slot = store.request_run(JOB, by="ops").slot_ms
    else:
        slot = recent(store)
    run = win(store, slot, runner="api-1", reason=reason)
    assert run.attempts == (Attempt(1, "api-1", reason, run.started_ms, None, "running", None),)
    assert stored(store, JOB, slot).attempts == run.attempts


def test_a_takeover_ends_the_dead_attempt_as_expired_at_its_lease_end(store: Store) -> None:
    """The next attempt ends the current one as expired, ended_ms its lease end, and records itself."""
    slot = recent(store)
    first = win(store, slot, runner="A", lease_ms=SHORT)
    expire(store, first)
    second = win(store, slot, runner="B", reason="takeover", lease_ms=LONG)
    assert second.attempts == (ended(first, "expired", first.lease_end_ms), running(second))
    assert stored(store, JOB, slot).attempts == second.attempts
    dead = kill(store, second)
    third = win(store, slot, runner="C", reason="takeover")
    assert third.attempts == (second.attempts[0], ended(second, "expired", dead.lease_end_ms), running(third))


def test_a_release_ends_the_attempt_as_handed_over_now_and_the_next_attempt_keeps_it(store: Store) -> None:
    """release ends the current attempt as handed_over at now; the takeover after it leaves that
    attempt as it is and records its own."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    before = store.now_ms()
    assert store.release(JOB, slot, run.token)
    after = store.now_ms()
    released = stored(store, JOB, slot)
    (attempt,) = released.attempts
    assert attempt == ended(run, "handed_over", released.lease_end_ms)
    assert before <= released.lease_end_ms <= after
    second = win(store, slot, runner="backup", reason="takeover")
    assert second.attempts == (attempt, running(second))


@pytest.mark.parametrize("status, error", [("success", None), ("failed", "ValueError: boom ✓")])
def test_finish_ends_the_attempt_as_success_or_failed_now(store: Store, status: str, error: Optional[str]) -> None:
    """finish ends the current attempt with the run's status, at now, with its error."""
    slot = recent(store)
    first = win(store, slot, lease_ms=SHORT)
    expire(store, first)
    second = win(store, slot, runner="r2", reason="takeover")
    before = store.now_ms()
    assert store.finish(JOB, slot, second.token, status, error=error)
    after = store.now_ms()
    done = stored(store, JOB, slot)
    assert done.finished_ms is not None and before <= done.finished_ms <= after
    assert done.attempts == (second.attempts[0], ended(second, status, done.finished_ms, error))


def test_a_run_superseded_by_a_newer_run_ends_its_attempt_as_expired(store: Store) -> None:
    """Rule 11: the newer run's claim interrupts the dead earlier run; its attempt ends expired at its lease end."""
    s1 = recent(store, 2_000)
    run = win(store, s1, lease_ms=LONG)
    dead = kill(store, run)
    win(store, s1 + 1_000)
    old = stored(store, JOB, s1)
    assert old.status == "interrupted"
    assert old.attempts == (ended(run, "expired", dead.lease_end_ms),)


def test_a_takeover_that_finds_a_newer_run_ends_the_attempt_as_expired(store: Store) -> None:
    """Rule 4: the takeover interrupts the run; its attempt ends expired at its lease end; none is added."""
    s1 = recent(store, 2_000)
    run = win(store, s1, lease_ms=LONG)
    win(store, s1 + 1_000, overlap="allow")
    dead = kill(store, run)
    result = claim(store, s1, runner="backup", reason="takeover")
    assert result.outcome == "done" and result.run is not None
    assert result.run.attempts == (ended(run, "expired", dead.lease_end_ms),)
    assert stored(store, JOB, s1) == result.run


def test_max_attempts_used_up_ends_the_last_attempt_as_expired(store: Store) -> None:
    """Rule 5: the run is interrupted; its last attempt ends expired at its lease end."""
    slot = recent(store)
    first = win(store, slot, lease_ms=SHORT, max_attempts=2)
    expire(store, first)
    second = win(store, slot, runner="r2", reason="takeover", lease_ms=SHORT, max_attempts=2)
    expire(store, second)
    result = claim(store, slot, runner="r3", reason="takeover", max_attempts=2)
    assert result.outcome == "done" and result.run is not None and result.run.status == "interrupted"
    assert result.run.attempts == (
        ended(first, "expired", first.lease_end_ms),
        ended(second, "expired", second.lease_end_ms),
    )


def test_an_interrupted_run_keeps_a_released_attempt_handed_over(store: Store) -> None:
    """An interruption ends only an attempt that was not released: a released one stays handed_over."""
    s1 = recent(store, 2_000)
    run = win(store, s1, lease_ms=LONG)
    assert store.release(JOB, s1, run.token)
    handed = stored(store, JOB, s1).attempts
    win(store, s1 + 1_000)
    old = stored(store, JOB, s1)
    assert old.status == "interrupted"
    assert old.attempts == handed and handed[0].outcome == "handed_over"


def test_a_retry_and_a_heartbeat_change_no_attempt(store: Store) -> None:
    """The retry of the claim that won (rule 2) and a heartbeat leave the attempts as they are."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG, token="tok")
    assert store.heartbeat(JOB, slot, run.token, 60_000)
    assert stored(store, JOB, slot).attempts == run.attempts
    retried = win(store, slot, lease_ms=LONG, token="tok")
    assert retried.attempts == run.attempts == (running(run),)
    kill(store, run)
    assert store.heartbeat(JOB, slot, run.token, LONG)  # renews the lease that ran out
    assert stored(store, JOB, slot).attempts == (running(run),)


def test_the_newest_attempts_are_kept(store: Store) -> None:
    """A run of 25 attempts keeps the newest MAX_ATTEMPTS_KEPT (20), oldest first; the run's own
    attempt number goes on counting."""
    assert MAX_ATTEMPTS_KEPT == 20
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG, max_attempts=1)
    for number in range(2, 26):
        assert store.release(JOB, slot, run.token)
        run = win(store, slot, runner=f"r{number}", reason="takeover", lease_ms=LONG, max_attempts=1)
        assert run.attempt == number
        assert len(run.attempts) == min(number, MAX_ATTEMPTS_KEPT)
    assert [a.number for a in run.attempts] == list(range(6, 26))
    assert [a.runner for a in run.attempts] == [f"r{n}" for n in range(6, 26)]
    assert {a.outcome for a in run.attempts[:-1]} == {"handed_over"}
    assert run.attempts[-1] == running(run)
    assert store.finish(JOB, slot, run.token, "success")
    done = stored(store, JOB, slot)
    assert [a.number for a in done.attempts] == list(range(6, 26))
    assert done.attempts[-1].outcome == "success"


def test_every_read_of_a_run_holds_its_attempts(store: Store) -> None:
    """get_run, runs, unfinished and the run in every claim answer carry the same attempts."""
    slot = recent(store, 2_000)
    first = win(store, slot, lease_ms=SHORT)
    expire(store, first)
    run = win(store, slot, runner="r2", reason="takeover", lease_ms=LONG)
    assert len(run.attempts) == 2
    assert store.get_run(JOB, slot) == run
    assert store.runs(JOB) == [run]
    assert store.unfinished(JOB) == [run]
    running_answer = claim(store, slot, runner="r3")
    assert running_answer.outcome == "running" and running_answer.run == run
    overlap = claim(store, slot + 1_000, runner="r3")
    assert overlap.outcome == "overlap" and overlap.run == run
    assert store.finish(JOB, slot, run.token, "success")
    done = stored(store, JOB, slot)
    assert len(done.attempts) == 2 and done.attempts[-1].outcome == "success"
    answer = claim(store, slot, runner="r3")
    assert answer.outcome == "done" and answer.run == done
    assert store.runs(JOB) == [done]


def test_a_runs_dict_holds_its_attempts_as_json_values(store: Store) -> None:
    """Run.to_dict() holds the attempts as plain dicts that JSON can write."""
    slot = recent(store)
    first = win(store, slot, runner="A", lease_ms=SHORT)
    expire(store, first)
    second = win(store, slot, runner="B", reason="takeover")
    assert store.finish(JOB, slot, second.token, "failed", error="boom")
    data = stored(store, JOB, slot).to_dict()
    assert json.loads(json.dumps(data))["attempts"] == data["attempts"]
    no_return = {"returned_ms": None, "returned": None, "returned_error": None}  # rule 26: none recorded
    assert data["attempts"] == [
        {"number": 1, "runner": "A", "reason": "schedule", "started_ms": first.started_ms,
         "ended_ms": first.lease_end_ms, "outcome": "expired", "error": None, **no_return},
        {"number": 2, "runner": "B", "reason": "takeover", "started_ms": second.started_ms,
         "ended_ms": data["finished_ms"], "outcome": "failed", "error": "boom", **no_return},
    ]  # fmt: skip


def test_a_manual_run_taken_over_records_both_reasons(store: Store) -> None:
    """A manual run is an ordinary run: its takeover records attempt 2 with reason takeover."""
    slot = store.request_run(JOB, by="ops").slot_ms
    first = win(store, slot, reason="manual", lease_ms=LONG)
    dead = kill(store, first)
    second = win(store, slot, runner="backup", reason="takeover")
    assert [(a.number, a.reason, a.outcome) for a in second.attempts] == [
        (1, "manual", "expired"),
        (2, "takeover", "running"),
    ]
    assert second.attempts[0].ended_ms == dead.lease_end_ms
