"""The store contract, rule by rule, against every store (the ``store`` / ``backend`` fixtures).

Each rule of the store contract (numbered 1-21 in ``docs/protocol.rst`` and
in the docstrings of :class:`~leasecron.Store`) is written once here, against
the public :class:`~leasecron.Store` API only, so a new backend joins by
adding a ``Backend`` in ``tests/conftest.py``.

Times are real: slots are placed relative to ``store.now_ms()`` (the store's
clock), a lease is let run out by waiting until the store's clock has passed
its end, and a lease that must stay alive during a set-up is long (30 s) and
shortened afterwards with a heartbeat of 1 ms where the test needs it dead.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, List, Optional, Tuple

import pytest

import leasecron
from leasecron import Claim, Run, Store
from tests.helpers import wait_for

JOB = "job"
LONG = 30_000  # a lease that stays alive for the whole test
SHORT = 150  # a lease the test lets run out
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# -- helpers -------------------------------------------------------------------


def claim(store: Store, slot_ms: int, job: str = JOB, **kwargs: Any) -> Claim:
    """A claim with a default runner (``r1``) and any options."""
    kwargs.setdefault("runner", "r1")
    return store.claim(job, slot_ms, **kwargs)


def win(store: Store, slot_ms: int, job: str = JOB, **kwargs: Any) -> Run:
    """Claim, assert the claim was won, and return the run."""
    result = claim(store, slot_ms, job, **kwargs)
    assert result.outcome == "won", result
    assert result.won
    assert result.run is not None
    return result.run


def expire(store: Store, run: Run) -> None:
    """Wait until the store's clock has passed the lease end of ``run``."""
    wait_for(lambda: store.now_ms() > run.lease_end_ms, timeout=10)


def kill(store: Store, run: Run) -> Run:
    """Let the runner of ``run`` die: shorten its lease to 1 ms and wait for it to run out."""
    assert store.heartbeat(run.job, run.slot_ms, run.token, 1)
    current = store.get_run(run.job, run.slot_ms)
    assert current is not None
    expire(store, current)
    return current


def recent(store: Store, ago_ms: int = 1_000) -> int:
    """A slot ``ago_ms`` before the store's now."""
    return store.now_ms() - ago_ms


def running_then_next_slot(store: Store) -> Tuple[int, Run, int]:
    """A run won for a slot 2 s ago with a long lease, and the job's next slot: (its slot, the run, the next slot)."""
    s1 = recent(store, 2_000)
    return s1, win(store, s1, lease_ms=LONG), s1 + 1_000


def stored(store: Store, job: str, slot_ms: int) -> Run:
    run = store.get_run(job, slot_ms)
    assert run is not None, f"no run stored for {job!r} at {slot_ms}"
    return run


def slots(runs: List[Run]) -> List[int]:
    return [r.slot_ms for r in runs]


# -- rule 12: a claim for a slot with no run wins attempt 1 and gets a lease -----


def test_first_claim_wins_attempt_1_with_a_lease(store: Store) -> None:
    """A new claim for a slot with no state wins attempt 1 with a fresh token and lease_end = now + lease_ms."""
    slot = recent(store)
    before = store.now_ms()
    result = store.claim(JOB, slot, runner="api-2", lease_ms=5_000)
    after = store.now_ms()

    assert result.outcome == "won" and result.won
    run = result.run
    assert run is not None
    assert run.job == JOB
    assert run.slot_ms == slot
    assert run.attempt == 1
    assert isinstance(run.token, str) and run.token != ""
    assert run.runner == "api-2"
    assert run.status == "running"
    assert run.reason == "schedule"
    assert before + 5_000 <= run.lease_end_ms <= after + 5_000
    assert before <= run.started_ms <= after
    assert run.handed_over is False
    assert run.error is None
    assert run.finished_ms is None
    assert run.slot == EPOCH + timedelta(milliseconds=slot)
    assert store.get_run(JOB, slot) == run


@pytest.mark.parametrize("reason", ["schedule", "catch-up"])
def test_won_run_records_the_claim_reason(store: Store, reason: str) -> None:
    """The reason of the winning claim is stored with the run."""
    slot = recent(store)
    run = win(store, slot, reason=reason)
    assert run.reason == reason
    assert stored(store, JOB, slot).reason == reason


@pytest.mark.parametrize("offset_ms", [0, 1, 499, 500, 999, 12_345])
def test_slot_is_the_aware_utc_datetime_of_slot_ms(store: Store, offset_ms: int) -> None:
    """Run.slot is the timezone-aware UTC datetime of slot_ms, to the millisecond."""
    slot = (store.now_ms() - 30_000) // 1_000 * 1_000 + offset_ms  # a whole second plus offset_ms
    run = win(store, slot, max_late_ms=60_000)
    for r in (run, stored(store, JOB, slot)):
        assert r.slot.tzinfo is not None and r.slot.utcoffset() == timedelta(0)
        assert r.slot == EPOCH + timedelta(milliseconds=slot)


def test_tokens_differ_between_attempts_and_runs(store: Store) -> None:
    """Every attempt of every run gets its own token."""
    s1 = recent(store, 3_000)
    first = win(store, s1, lease_ms=SHORT)
    other_job = win(store, s1, job="other")
    expire(store, first)
    second = win(store, s1, reason="takeover", runner="r2")
    assert second.attempt == 2
    s2 = recent(store, 1_000)
    assert store.finish(JOB, s1, second.token, "success")
    newer = win(store, s2)
    tokens = [first.token, other_job.token, second.token, newer.token]
    assert len(set(tokens)) == len(tokens)


# -- rules 1, 3 and 7: a claim on an ended or live run; a takeover of no run -----


def test_claim_on_live_lease_is_running_and_returns_the_live_run(store: Store) -> None:
    """A claim for a run whose lease is alive answers running with that run; nothing changes."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    for reason in ("schedule", "catch-up", "takeover"):
        result = store.claim(JOB, slot, runner="backup", reason=reason, lease_ms=LONG)
        assert result.outcome == "running"
        assert not result.won
        assert result.run == run  # same token, runner, attempt, lease end
    assert stored(store, JOB, slot) == run


@pytest.mark.parametrize("status", ["success", "failed"])
def test_claim_on_finished_run_is_done(store: Store, status: str) -> None:
    """A claim for a run that ended answers done with the ended run, whatever its reason."""
    slot = recent(store)
    run = win(store, slot)
    assert store.finish(JOB, slot, run.token, status, error="boom" if status == "failed" else None)
    ended = stored(store, JOB, slot)
    for reason in ("schedule", "catch-up", "takeover"):
        result = store.claim(JOB, slot, runner="r2", reason=reason)
        assert result.outcome == "done"
        assert result.run == ended
        assert result.run.status == status
    assert stored(store, JOB, slot) == ended


def test_takeover_claim_for_a_slot_without_run_is_none_and_creates_nothing(store: Store) -> None:
    """A takeover claim never creates a run: for a slot with no run it answers none."""
    now = store.now_ms()
    for slot in (now - 1_000, now - 3_600_000, now + 60_000):  # recent, far past, far future
        result = store.claim(JOB, slot, runner="r1", reason="takeover")
        assert result.outcome == "none"
        assert result.run is None
        assert store.get_run(JOB, slot) is None
    assert store.jobs() == []
    assert store.runs(JOB) == []


def test_takeover_claim_is_never_late(store: Store) -> None:
    """A takeover claim wins an expired run even when its slot is far older than max_late_ms + 10 s."""
    slot = recent(store, 200_000)
    run = win(store, slot, max_late_ms=300_000, lease_ms=SHORT)
    expire(store, run)
    result = store.claim(JOB, slot, runner="r2", reason="takeover", max_late_ms=0)
    assert result.outcome == "won"
    assert result.run is not None and result.run.attempt == 2 and result.run.runner == "r2"


# -- rules 8 and 9: early and late ----------------------------------------------


def test_claim_more_than_10s_ahead_is_early_and_creates_nothing(store: Store) -> None:
    """A new claim for a slot more than 10 s after the store's now is early; nothing is stored."""
    slot = store.now_ms() + 11_000
    result = claim(store, slot)
    assert result.outcome == "early"
    assert result.run is None
    assert store.get_run(JOB, slot) is None
    assert store.jobs() == []


@pytest.mark.parametrize("ahead_ms", [9_000, 10_000])
def test_claim_up_to_10s_ahead_wins(store: Store, ahead_ms: int) -> None:
    """A new claim for a slot at most 10 s after the store's now is not early: it wins."""
    slot = store.now_ms() + ahead_ms  # the claim reads now later, so slot <= now + 10 s
    run = win(store, slot)
    assert run.slot_ms == slot


def test_claim_older_than_max_late_plus_10s_is_late_and_creates_nothing(store: Store) -> None:
    """A new claim whose slot is more than max_late_ms + 10 s before now is late; nothing is stored."""
    slot = recent(store, 10_500)
    result = claim(store, slot, max_late_ms=0)
    assert result.outcome == "late"
    assert store.get_run(JOB, slot) is None
    assert store.jobs() == []

    slot = recent(store, 15_500)
    assert claim(store, slot, max_late_ms=5_000).outcome == "late"
    assert store.get_run(JOB, slot) is None


def test_claim_within_max_late_plus_10s_wins(store: Store) -> None:
    """A new claim whose slot is less than max_late_ms + 10 s old wins."""
    slot = recent(store, 9_000)
    run = win(store, slot, max_late_ms=0)
    assert run.attempt == 1


def test_catch_up_claim_with_large_max_late_wins(store: Store) -> None:
    """A catch-up claim for a slot due four minutes ago, with max_late_ms = catch_up_ms, wins."""
    slot = recent(store, 240_000)
    run = win(store, slot, reason="catch-up", max_late_ms=300_000)
    assert run.reason == "catch-up"
    assert run.attempt == 1


@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_claim_older_than_the_newest_run_is_late(store: Store, overlap: str) -> None:
    """A new claim is late when a newer slot of the job already has a run; nothing is stored."""
    s2 = recent(store, 1_000)
    newer = win(store, s2)
    s1 = s2 - 2_000
    for newer_status in ("running", "success"):
        if newer_status == "success":
            assert store.finish(JOB, s2, newer.token, "success")
        result = claim(store, s1, max_late_ms=300_000, overlap=overlap, reason="catch-up")
        assert result.outcome == "late"
        assert result.run is None or result.run.slot_ms == s2
        assert store.get_run(JOB, s1) is None
    assert slots(store.runs(JOB)) == [s2]


# -- rules 10, 11 and 4: overlap, and earlier runs whose lease ended ----------------


def test_overlap_skip_refuses_new_slot_while_earlier_lease_is_alive(store: Store) -> None:
    """With overlap="skip", a new slot is refused while an earlier run's lease is alive; run is that earlier run."""
    s1, earlier, s2 = running_then_next_slot(store)
    result = claim(store, s2, runner="r2", overlap="skip")
    assert result.outcome == "overlap"
    assert result.run == earlier
    assert store.get_run(JOB, s2) is None
    assert stored(store, JOB, s1) == earlier


def test_overlap_allow_wins_while_earlier_run_is_alive(store: Store) -> None:
    """With overlap="allow", a new slot wins while an earlier run's lease is alive, and the earlier keeps running."""
    s1, earlier, s2 = running_then_next_slot(store)
    newer = win(store, s2, runner="r2", overlap="allow")
    assert newer.attempt == 1 and newer.runner == "r2"
    assert stored(store, JOB, s1) == earlier
    assert [(r.slot_ms, r.token) for r in store.unfinished(JOB)] == [(s1, earlier.token), (s2, newer.token)]


@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_dead_earlier_run_does_not_block_and_is_interrupted(store: Store, overlap: str) -> None:
    """An earlier run with an expired lease does not block a new slot: the new claim wins, the old is interrupted."""
    s1 = recent(store, 2_000)
    dead = kill(store, win(store, s1, lease_ms=LONG))
    s2 = s1 + 1_000
    before = store.now_ms()
    newer = win(store, s2, runner="r2", overlap=overlap)
    after = store.now_ms()

    old = stored(store, JOB, s1)
    assert old.status == "interrupted"
    assert old.finished_ms is not None and before <= old.finished_ms <= after
    assert old.token == dead.token and old.attempt == 1
    assert [r.slot_ms for r in store.unfinished(JOB)] == [s2]

    # Not retried: a backup's takeover claim for the old slot now finds it ended.
    result = store.claim(JOB, s1, runner="r3", reason="takeover")
    assert result.outcome == "done"
    assert result.run == old
    assert stored(store, JOB, s2) == newer


def test_backup_first_takes_over_then_next_slot_overlaps(store: Store) -> None:
    """When the backup's takeover comes before the next slot, it wins attempt 2 and the next slot is an overlap."""
    s1 = recent(store, 2_000)
    kill(store, win(store, s1, lease_ms=LONG))
    second = win(store, s1, runner="backup", reason="takeover", lease_ms=LONG)
    assert second.attempt == 2
    s2 = s1 + 1_000
    result = claim(store, s2, runner="r3", overlap="skip")
    assert result.outcome == "overlap"
    assert result.run == second
    assert store.get_run(JOB, s2) is None


def test_expired_run_with_a_newer_run_is_interrupted_by_takeover(store: Store) -> None:
    """A takeover claim for an expired run whose job has a newer run answers done and marks it interrupted."""
    s1, old, s2 = running_then_next_slot(store)
    newer = win(store, s2, runner="r2", overlap="allow", lease_ms=LONG)
    assert stored(store, JOB, s1).status == "running"
    dead = kill(store, old)

    before = store.now_ms()
    result = store.claim(JOB, s1, runner="backup", reason="takeover")
    after = store.now_ms()
    assert result.outcome == "done"
    assert result.run is not None
    assert result.run.status == "interrupted"
    assert result.run.token == dead.token and result.run.attempt == 1
    assert result.run.finished_ms is not None and before <= result.run.finished_ms <= after
    assert stored(store, JOB, s1) == result.run
    assert stored(store, JOB, s2) == newer


def test_expired_run_with_a_newer_finished_run_is_interrupted_by_takeover(store: Store) -> None:
    """A newer run blocks the takeover of an expired older run even once that newer run has finished."""
    s1, old, s2 = running_then_next_slot(store)
    newer = win(store, s2, runner="r2", overlap="allow")
    assert store.finish(JOB, s2, newer.token, "success")
    kill(store, old)
    result = store.claim(JOB, s1, runner="backup", reason="takeover")
    assert result.outcome == "done"
    assert stored(store, JOB, s1).status == "interrupted"


# -- the lease boundary: alive exactly while the store's clock is before lease_end ----------------


def _poll_until_expired(store: Store, lease_end_ms: int, attempt: Any) -> List[str]:
    """Call ``attempt()`` until the store's clock passes ``lease_end_ms``; classify each answer.

    Returns the outcomes seen while the lease was certainly alive (the call
    ended before ``lease_end_ms``) and, last, the first outcome seen once it
    had certainly run out (the call started after ``lease_end_ms``).
    """
    alive: List[str] = []
    while True:
        before = store.now_ms()
        outcome = attempt()
        after = store.now_ms()
        if after < lease_end_ms:
            alive.append(outcome)
        elif before > lease_end_ms:
            return alive + [outcome]
        elif outcome == "won":  # decided somewhere around lease_end: legitimately either
            return alive + [outcome]
        time.sleep(0.005)


def test_lease_is_alive_until_its_end_then_a_takeover_wins(store: Store) -> None:
    """A takeover claim is told running while now < lease_end, and wins once now > lease_end."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    assert store.heartbeat(JOB, slot, run.token, 400)
    lease_end = stored(store, JOB, slot).lease_end_ms

    def takeover() -> str:
        return store.claim(JOB, slot, runner="backup", reason="takeover", lease_ms=LONG).outcome

    seen = _poll_until_expired(store, lease_end, takeover)
    assert seen[-1] == "won"
    assert seen[:-1] and set(seen[:-1]) == {"running"}, seen
    assert stored(store, JOB, slot).attempt == 2


def test_overlap_lasts_until_the_earlier_lease_ends_then_the_new_slot_wins(store: Store) -> None:
    """A new slot is an overlap while the earlier run's lease is alive, and wins once it ran out."""
    s1 = recent(store, 2_000)
    run = win(store, s1, lease_ms=LONG)
    assert store.heartbeat(JOB, s1, run.token, 400)
    lease_end = stored(store, JOB, s1).lease_end_ms
    s2 = s1 + 1_000

    def new_claim() -> str:
        outcome = store.claim(JOB, s2, runner="next", lease_ms=LONG).outcome
        if outcome == "overlap":
            assert store.get_run(JOB, s2) is None
        return outcome

    seen = _poll_until_expired(store, lease_end, new_claim)
    assert seen[-1] == "won"
    assert seen[:-1] and set(seen[:-1]) == {"overlap"}, seen
    assert stored(store, JOB, s1).status == "interrupted"


# -- rules 5 and 6: takeover, attempts and max_attempts -----------------------------


def test_takeover_of_expired_lease_wins_next_attempt(store: Store) -> None:
    """A run whose lease ran out is won by the next claim as the next attempt, with a new token, runner and lease."""
    slot = recent(store)
    first = win(store, slot, lease_ms=SHORT)
    expire(store, first)
    before = store.now_ms()
    result = store.claim(JOB, slot, runner="backup", reason="takeover", lease_ms=4_000)
    after = store.now_ms()
    assert result.outcome == "won"
    run = result.run
    assert run is not None
    assert run.attempt == 2
    assert run.token != first.token and run.token != ""
    assert run.runner == "backup"
    assert run.reason == "takeover"
    assert run.status == "running"
    assert run.handed_over is False
    assert before + 4_000 <= run.lease_end_ms <= after + 4_000
    assert before <= run.started_ms <= after
    assert run.finished_ms is None
    assert stored(store, JOB, slot) == run


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_max_attempts_ends_a_run_whose_runners_keep_dying(store: Store, max_attempts: int) -> None:
    """After max_attempts attempts ended by dead runners, the next takeover claim answers done, interrupting the run."""
    slot = recent(store)
    run = win(store, slot, lease_ms=SHORT, max_attempts=max_attempts)
    for attempt in range(2, max_attempts + 1):
        expire(store, run)
        run = win(store, slot, runner=f"r{attempt}", reason="takeover", lease_ms=SHORT, max_attempts=max_attempts)
        assert run.attempt == attempt
    expire(store, run)

    before = store.now_ms()
    result = store.claim(JOB, slot, runner="late-backup", reason="takeover", max_attempts=max_attempts)
    after = store.now_ms()
    assert result.outcome == "done"
    ended = stored(store, JOB, slot)
    assert result.run == ended
    assert ended.status == "interrupted"
    assert ended.attempt == max_attempts
    assert ended.token == run.token
    assert ended.finished_ms is not None and before <= ended.finished_ms <= after
    assert store.unfinished(JOB) == []
    assert store.claim(JOB, slot, runner="x", reason="takeover", max_attempts=max_attempts).outcome == "done"


def test_released_attempts_do_not_count_against_max_attempts(store: Store) -> None:
    """Hand-overs don't count: a run released again and again keeps being won past max_attempts."""
    slot = recent(store)
    run = win(store, slot, max_attempts=2, lease_ms=LONG)
    for attempt in range(2, 7):
        assert store.release(JOB, slot, run.token)
        run = win(store, slot, runner=f"r{attempt}", reason="takeover", max_attempts=2, lease_ms=LONG)
        assert run.attempt == attempt
        assert run.handed_over is True


def test_deaths_and_releases_mixed_only_deaths_count(store: Store) -> None:
    """With max_attempts=2, one death plus several releases still leaves one more attempt; the second death ends it."""
    slot = recent(store)
    opts = dict(max_attempts=2, reason="takeover")
    run = win(store, slot, max_attempts=2, lease_ms=SHORT)
    expire(store, run)  # death 1
    run = win(store, slot, runner="r2", lease_ms=LONG, **opts)
    assert run.attempt == 2
    for attempt in (3, 4):
        assert store.release(JOB, slot, run.token)
        run = win(store, slot, runner=f"r{attempt}", lease_ms=SHORT if attempt == 4 else LONG, **opts)
        assert run.attempt == attempt
    expire(store, run)  # death 2
    result = store.claim(JOB, slot, runner="r5", **opts)
    assert result.outcome == "done"
    assert stored(store, JOB, slot).status == "interrupted"
    assert stored(store, JOB, slot).attempt == 4


# -- rule 13: heartbeats ---------------------------------------------------------------


def test_heartbeat_with_current_token_moves_the_lease_end(store: Store) -> None:
    """A heartbeat with the current token sets lease_end to now + lease_ms and changes nothing else."""
    slot = recent(store)
    run = win(store, slot, lease_ms=1_000)
    before = store.now_ms()
    assert store.heartbeat(JOB, slot, run.token, 60_000) is True
    after = store.now_ms()
    renewed = stored(store, JOB, slot)
    assert before + 60_000 <= renewed.lease_end_ms <= after + 60_000
    assert renewed == Run(**{**_fields(run), "lease_end_ms": renewed.lease_end_ms})


def test_heartbeat_can_shorten_the_lease(store: Store) -> None:
    """A heartbeat sets lease_end to now + lease_ms even when that is earlier than before."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    before = store.now_ms()
    assert store.heartbeat(JOB, slot, run.token, 1)
    after = store.now_ms()
    assert before + 1 <= stored(store, JOB, slot).lease_end_ms <= after + 1


def test_heartbeat_with_current_token_renews_an_expired_lease(store: Store) -> None:
    """A heartbeat with the current token renews a lease that ran out but was not taken over."""
    slot = recent(store)
    run = win(store, slot, lease_ms=SHORT)
    expire(store, run)
    before = store.now_ms()
    assert store.heartbeat(JOB, slot, run.token, LONG) is True
    after = store.now_ms()
    assert before + LONG <= stored(store, JOB, slot).lease_end_ms <= after + LONG
    # The lease is alive again: a backup is told running.
    assert store.claim(JOB, slot, runner="backup", reason="takeover").outcome == "running"


def test_heartbeat_with_wrong_token_is_refused(store: Store) -> None:
    """A heartbeat with a token that is not the current one returns False and leaves the run alone."""
    slot = recent(store)
    run = win(store, slot, lease_ms=1_000)
    for token in ("", "not-the-token", run.token + "x", run.token[:-1]):
        assert store.heartbeat(JOB, slot, token, 60_000) is False
    assert stored(store, JOB, slot) == run


def test_heartbeat_after_finish_is_refused(store: Store) -> None:
    """A heartbeat for a finished run returns False; the run stays finished."""
    slot = recent(store)
    run = win(store, slot)
    assert store.finish(JOB, slot, run.token, "success")
    ended = stored(store, JOB, slot)
    assert store.heartbeat(JOB, slot, run.token, 60_000) is False
    assert stored(store, JOB, slot) == ended


def test_heartbeat_after_release_is_refused(store: Store) -> None:
    """A released lease stays released: a heartbeat with the releasing token returns False, lease_end unchanged."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    assert store.release(JOB, slot, run.token)
    released = stored(store, JOB, slot)
    assert store.heartbeat(JOB, slot, run.token, 60_000) is False
    assert stored(store, JOB, slot) == released
    assert store.claim(JOB, slot, runner="backup", reason="takeover").outcome == "won"


def test_heartbeat_for_a_slot_without_run_is_refused(store: Store) -> None:
    """A heartbeat for a slot with no run returns False and creates nothing."""
    slot = recent(store)
    assert store.heartbeat(JOB, slot, "some-token", 60_000) is False
    assert store.get_run(JOB, slot) is None
    run = win(store, slot)
    assert store.heartbeat(JOB, slot + 1, run.token, 60_000) is False  # same job and token, other slot
    assert store.heartbeat("other", slot, run.token, 60_000) is False  # same slot and token, other job
    assert store.get_run(JOB, slot + 1) is None
    assert store.get_run("other", slot) is None
    assert store.jobs() == [JOB]


def test_fencing_old_token_is_refused_after_takeover(store: Store) -> None:
    """After a takeover, attempt 1's heartbeat, finish and release are refused; the record keeps attempt 2."""
    slot = recent(store)
    first = win(store, slot, lease_ms=SHORT, runner="A")
    expire(store, first)
    second = win(store, slot, lease_ms=LONG, runner="B", reason="takeover")
    assert second.attempt == 2

    assert store.heartbeat(JOB, slot, first.token, 60_000) is False
    assert store.finish(JOB, slot, first.token, "success") is False
    assert store.finish(JOB, slot, first.token, "failed", error="late") is False
    assert store.release(JOB, slot, first.token) is False
    current = stored(store, JOB, slot)
    assert current == second
    assert current.token == second.token and current.status == "running" and current.runner == "B"

    # The current attempt still works.
    assert store.heartbeat(JOB, slot, second.token, LONG) is True
    assert store.finish(JOB, slot, second.token, "success") is True


# -- rules 14 and 15: finish and release ----------------------------------------------------


def test_finish_success_ends_the_run(store: Store) -> None:
    """finish(success) with the current token records success and the finish time; the run is no longer unfinished."""
    slot = recent(store)
    run = win(store, slot)
    before = store.now_ms()
    assert store.finish(JOB, slot, run.token, "success") is True
    after = store.now_ms()
    ended = stored(store, JOB, slot)
    assert ended.status == "success"
    assert ended.error is None
    assert ended.finished_ms is not None and before <= ended.finished_ms <= after
    assert (ended.attempt, ended.token, ended.runner, ended.started_ms) == (
        run.attempt, run.token, run.runner, run.started_ms
    )
    assert store.unfinished(JOB) == []


@pytest.mark.parametrize("error", [None, "ValueError: boom", "Traceback (most recent call last):\n  é ü 日本 ✓\n" * 20])
def test_finish_failed_stores_the_error_text(store: Store, error: Optional[str]) -> None:
    """finish(failed) records failed and keeps the error text exactly."""
    slot = recent(store)
    run = win(store, slot)
    assert store.finish(JOB, slot, run.token, "failed", error=error) is True
    ended = stored(store, JOB, slot)
    assert ended.status == "failed"
    assert ended.error == error
    assert ended.finished_ms is not None


def test_finish_with_wrong_token_is_refused(store: Store) -> None:
    """finish with a token that is not the current one returns False and leaves the run running."""
    slot = recent(store)
    run = win(store, slot)
    assert store.finish(JOB, slot, "wrong", "success") is False
    assert store.finish(JOB, slot, "", "failed", error="x") is False
    assert store.finish(JOB, slot + 1, run.token, "success") is False
    assert stored(store, JOB, slot) == run
    assert store.get_run(JOB, slot + 1) is None


def test_second_finish_is_refused(store: Store) -> None:
    """A run finishes once: a second finish with the same token returns False and changes nothing."""
    slot = recent(store)
    run = win(store, slot)
    assert store.finish(JOB, slot, run.token, "success") is True
    ended = stored(store, JOB, slot)
    assert store.finish(JOB, slot, run.token, "failed", error="again") is False
    assert store.finish(JOB, slot, run.token, "success") is False
    assert stored(store, JOB, slot) == ended


def test_finish_of_interrupted_run_is_refused(store: Store) -> None:
    """A run marked interrupted cannot be finished by its last runner."""
    s1 = recent(store, 2_000)
    dead = kill(store, win(store, s1, lease_ms=LONG))
    win(store, s1 + 1_000)  # interrupts s1
    assert store.finish(JOB, s1, dead.token, "success") is False
    assert store.heartbeat(JOB, s1, dead.token, LONG) is False
    assert store.release(JOB, s1, dead.token) is False
    assert stored(store, JOB, s1).status == "interrupted"


@pytest.mark.parametrize("status", ["done", "running", "interrupted", "SUCCESS", "", None])
def test_finish_with_invalid_status_raises_config_error(store: Store, status: Any) -> None:
    """finish with a status other than success/failed raises ConfigError (a ValueError) and changes nothing."""
    slot = recent(store)
    run = win(store, slot)
    with pytest.raises(leasecron.ConfigError, match="status") as info:
        store.finish(JOB, slot, run.token, status)
    assert isinstance(info.value, ValueError)
    assert stored(store, JOB, slot) == run


def test_release_ends_the_lease_now_and_hands_over(store: Store) -> None:
    """release sets lease_end to now and records the hand-over; a takeover right after wins attempt 2."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    before = store.now_ms()
    assert store.release(JOB, slot, run.token) is True
    after = store.now_ms()
    released = stored(store, JOB, slot)
    assert before <= released.lease_end_ms <= after
    assert released.status == "running"
    assert released.handed_over is True
    assert (released.attempt, released.token, released.finished_ms) == (1, run.token, None)

    result = store.claim(JOB, slot, runner="backup", reason="takeover", lease_ms=LONG)
    assert result.outcome == "won"
    assert result.run is not None
    assert result.run.attempt == 2
    assert result.run.reason == "takeover"
    assert result.run.runner == "backup"
    assert result.run.handed_over is True
    assert result.run.token not in (run.token, "")
    # The new attempt's lease is not released: its runner renews it.
    assert store.heartbeat(JOB, slot, result.run.token, LONG) is True


def test_second_release_is_refused(store: Store) -> None:
    """A lease is released once: a second release with the same token returns False and changes nothing."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    assert store.release(JOB, slot, run.token) is True
    released = stored(store, JOB, slot)
    assert store.release(JOB, slot, run.token) is False
    assert stored(store, JOB, slot) == released


def test_release_with_wrong_token_is_refused(store: Store) -> None:
    """release with a token that is not the current one returns False; the lease stays alive."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG)
    assert store.release(JOB, slot, "wrong") is False
    assert store.release(JOB, slot + 1, run.token) is False
    assert stored(store, JOB, slot) == run
    assert store.claim(JOB, slot, runner="backup", reason="takeover").outcome == "running"


def test_release_after_finish_is_refused(store: Store) -> None:
    """release of a finished run returns False and the run stays finished."""
    slot = recent(store)
    run = win(store, slot)
    assert store.finish(JOB, slot, run.token, "success")
    ended = stored(store, JOB, slot)
    assert store.release(JOB, slot, run.token) is False
    assert stored(store, JOB, slot) == ended


# -- rules 2 and 6: a claim's token, and the retry of a claim whose answer was lost ----------------


def test_a_claim_given_a_token_gives_it_to_the_attempt_it_wins(store: Store) -> None:
    """A won claim's attempt gets the token the claim carries: attempt 1 and a takeover's next attempt."""
    slot = recent(store)
    first = win(store, slot, lease_ms=SHORT, token="first-token")
    assert (first.attempt, first.token) == (1, "first-token")
    expire(store, first)
    second = win(store, slot, runner="r2", reason="takeover", token="second-token")
    assert (second.attempt, second.token, second.runner) == (2, "second-token", "r2")
    assert stored(store, JOB, slot) == second


@pytest.mark.parametrize("won_by", ["schedule", "takeover"])
def test_the_retry_of_a_won_claim_wins_the_same_attempt_with_a_renewed_lease(store: Store, won_by: str) -> None:
    """A claim with the token and runner of the run's current attempt (the retry of the claim that
    won it, whose answer was lost) answers won with that attempt again, whatever its reason: same
    number, token, runner, reason and start; only the lease end moves, to now + lease_ms."""
    slot = recent(store)
    if won_by == "takeover":
        expire(store, win(store, slot, lease_ms=SHORT))
    run = win(store, slot, runner="r2", reason=won_by, lease_ms=LONG, token="retried")
    for reason, lease_ms in (("schedule", 60_000), ("catch-up", 5_000), ("takeover", LONG)):
        before = store.now_ms()
        result = store.claim(JOB, slot, runner="r2", reason=reason, lease_ms=lease_ms, token="retried")
        after = store.now_ms()
        assert result.outcome == "won", (reason, result)
        assert result.run is not None
        assert before + lease_ms <= result.run.lease_end_ms <= after + lease_ms
        assert result.run == Run(**{**_fields(run), "lease_end_ms": result.run.lease_end_ms})
        assert stored(store, JOB, slot) == result.run
    assert store.heartbeat(JOB, slot, "retried", LONG) is True


def test_the_retry_of_a_won_claim_renews_a_lease_that_ran_out(store: Store) -> None:
    """A retry that comes after the attempt's lease ran out (and nobody took it over) wins that
    attempt again, as a heartbeat with its token would renew it; it is not the next attempt,
    and does not use up max_attempts."""
    slot = recent(store)
    run = win(store, slot, lease_ms=SHORT, max_attempts=1, token="late-retry")
    expire(store, run)
    before = store.now_ms()
    result = store.claim(JOB, slot, runner="r1", lease_ms=LONG, max_attempts=1, token="late-retry")
    after = store.now_ms()
    assert result.outcome == "won" and result.run is not None
    assert (result.run.attempt, result.run.token, result.run.status) == (1, "late-retry", "running")
    assert before + LONG <= result.run.lease_end_ms <= after + LONG
    assert store.claim(JOB, slot, runner="backup", reason="takeover", max_attempts=1).outcome == "running"


def test_the_token_of_the_current_attempt_from_another_runner_is_no_retry(store: Store) -> None:
    """A claim with the current attempt's token but another runner follows the usual rules: running
    while the lease is alive; once it ran out, the next attempt, with a new token (a token is never
    given to two attempts)."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG, token="shared")
    for reason in ("schedule", "takeover"):
        result = store.claim(JOB, slot, runner="r2", reason=reason, token="shared")
        assert result.outcome == "running" and result.run == run
    kill(store, run)
    result = store.claim(JOB, slot, runner="r2", reason="takeover", lease_ms=LONG, token="shared")
    assert result.outcome == "won" and result.run is not None
    assert (result.run.attempt, result.run.runner) == (2, "r2")
    assert result.run.token not in ("shared", "")
    assert store.heartbeat(JOB, slot, "shared", LONG) is False  # the dead attempt stays fenced
    assert stored(store, JOB, slot) == result.run


@pytest.mark.parametrize("status", ["success", "failed"])
def test_the_retry_of_a_claim_whose_run_ended_is_done(store: Store, status: str) -> None:
    """A retry that comes after its attempt finished answers done, whatever its reason; nothing changes."""
    slot = recent(store)
    run = win(store, slot, token="ended")
    assert store.finish(JOB, slot, run.token, status)
    ended = stored(store, JOB, slot)
    for reason in ("schedule", "catch-up", "takeover"):
        result = store.claim(JOB, slot, runner="r1", reason=reason, token="ended")
        assert result.outcome == "done" and result.run == ended
    assert stored(store, JOB, slot) == ended


def test_a_released_attempt_and_a_retry_with_its_token_never_share_a_token(store: Store) -> None:
    """A released attempt cannot be won again with its token: the claim follows the usual rules (its
    lease ended: the next attempt, a hand-over that costs no attempt) and that attempt gets a new
    token, so the released one's token stays fenced."""
    slot = recent(store)
    run = win(store, slot, lease_ms=LONG, max_attempts=1, token="handed")
    assert store.release(JOB, slot, run.token)
    result = store.claim(JOB, slot, runner="r1", lease_ms=LONG, max_attempts=1, token="handed")
    assert result.outcome == "won" and result.run is not None
    assert (result.run.attempt, result.run.runner, result.run.handed_over) == (2, "r1", True)
    assert result.run.token not in ("handed", "")
    assert store.heartbeat(JOB, slot, "handed", LONG) is False
    assert store.finish(JOB, slot, "handed", "success") is False
    assert store.heartbeat(JOB, slot, result.run.token, LONG) is True
    # the same token once more: attempt 2 holds another token and a live lease
    again = store.claim(JOB, slot, runner="r1", max_attempts=1, token="handed")
    assert again.outcome == "running" and again.run == stored(store, JOB, slot)


# -- queries -----------------------------------------------------------------------------------


def test_unfinished_lists_running_runs_oldest_slot_first(store: Store) -> None:
    """unfinished(job) lists the job's running runs only, oldest slot first."""
    base = recent(store, 5_000)
    runs = [win(store, base + i * 1_000, overlap="allow") for i in range(4)]
    win(store, base, job="other")
    assert store.finish(JOB, runs[1].slot_ms, runs[1].token, "success")
    assert store.finish(JOB, runs[3].slot_ms, runs[3].token, "failed", error="x")
    unfinished = store.unfinished(JOB)
    assert [(r.slot_ms, r.token) for r in unfinished] == [(r.slot_ms, r.token) for r in (runs[0], runs[2])]
    assert all(r.job == JOB and r.status == "running" for r in unfinished)
    assert store.unfinished("no-such-job") == []


def test_runs_lists_newest_slot_first_within_limit(store: Store) -> None:
    """runs(job, limit) lists the job's stored runs, newest slot first, at most limit."""
    base = recent(store, 6_000)
    made = []
    for i in range(5):
        run = win(store, base + i * 1_000)
        assert store.finish(JOB, run.slot_ms, run.token, "success")
        made.append(run.slot_ms)
    win(store, base, job="other")
    newest_first = list(reversed(made))
    assert slots(store.runs(JOB)) == newest_first
    assert slots(store.runs(JOB, limit=2)) == newest_first[:2]
    assert slots(store.runs(JOB, limit=1)) == newest_first[:1]
    assert slots(store.runs(JOB, limit=5)) == newest_first
    assert store.runs(JOB, limit=0) == []
    assert all(r.job == JOB for r in store.runs(JOB))
    assert store.runs("no-such-job") == []


def test_runs_default_limit_is_20(store: Store) -> None:
    """runs(job) without a limit lists at most 20 runs."""
    base = recent(store, 9_000)
    for i in range(22):
        run = win(store, base + i * 100)
        assert store.finish(JOB, run.slot_ms, run.token, "success")
    assert slots(store.runs(JOB)) == [base + i * 100 for i in reversed(range(2, 22))]


def test_jobs_lists_sorted_names_with_stored_runs(store: Store) -> None:
    """jobs() lists the names of jobs that have stored runs, sorted, each once."""
    assert store.jobs() == []
    slot = recent(store, 3_000)
    for name in ("b", "a", "c"):
        win(store, slot, job=name)
    win(store, slot + 1_000, job="a", overlap="allow")
    claim(store, slot, job="refused", reason="takeover")  # none: creates nothing
    claim(store, store.now_ms() + 60_000, job="early")  # early: creates nothing
    assert store.jobs() == ["a", "b", "c"]


def test_get_run_is_none_for_unknown_job_or_slot(store: Store) -> None:
    """get_run returns None for a job or slot that has no run."""
    slot = recent(store)
    assert store.get_run(JOB, slot) is None
    win(store, slot)
    assert store.get_run(JOB, slot - 1) is None
    assert store.get_run("unknown", slot) is None


# -- rule 12: history ----------------------------------------------------------------------------


def _finished_runs(store: Store, job: str, slot_list: List[int], max_late_ms: int, history_size: int = 100) -> None:
    for slot in slot_list:
        run = win(store, slot, job=job, max_late_ms=max_late_ms, history_size=history_size)
        assert store.finish(job, slot, run.token, "success")


def test_history_prunes_old_finished_runs_down_to_history_size(store: Store) -> None:
    """A won claim deletes the job's finished runs beyond the newest history_size, once older than its late horizon."""
    now = store.now_ms()
    old = [now - 200_000 + i * 10_000 for i in range(5)]  # 200 s .. 160 s ago
    _finished_runs(store, JOB, old, max_late_ms=300_000)
    assert slots(store.runs(JOB, limit=100)) == old[::-1]  # nothing pruned yet: all within 310 s

    new = recent(store, 1_000)
    win(store, new, max_late_ms=0, history_size=2)
    assert slots(store.runs(JOB, limit=100)) == [new, old[4], old[3]]
    for slot in old[:3]:
        assert store.get_run(JOB, slot) is None


def test_history_keeps_newest_finished_runs_counting_recent_ones(store: Store) -> None:
    """history_size counts the newest finished runs, recent ones included."""
    now = store.now_ms()
    old = [now - 200_000, now - 190_000, now - 180_000]
    _finished_runs(store, JOB, old, max_late_ms=300_000)
    recent_slot = now - 8_000
    _finished_runs(store, JOB, [recent_slot], max_late_ms=0)  # history_size 100: nothing deleted
    assert len(store.runs(JOB, limit=100)) == 4

    new = now - 7_000
    win(store, new, max_late_ms=0, history_size=2)
    assert slots(store.runs(JOB, limit=100)) == [new, recent_slot, old[2]]


def test_history_never_deletes_runs_within_the_late_horizon(store: Store) -> None:
    """Runs whose slot is within max_late_ms + 10 s of now (of the pruning claim) are kept beyond history_size."""
    now = store.now_ms()
    # max_late_ms=0: slots less than 10 s old are all within the horizon.
    fresh = [now - 9_000 + i * 100 for i in range(5)]
    _finished_runs(store, "fresh", fresh, max_late_ms=0, history_size=2)
    assert slots(store.runs("fresh", limit=100)) == fresh[::-1]

    # max_late_ms=60 s, history_size=1: slots 50..20 s old are all within the 70 s horizon.
    older = [now - 50_000, now - 40_000, now - 30_000, now - 20_000]
    _finished_runs(store, JOB, older, max_late_ms=60_000, history_size=1)
    assert slots(store.runs(JOB, limit=100)) == older[::-1]

    # The horizon is that of the pruning claim: max_late_ms=25 s deletes only slots older than 35 s.
    new = now - 10_000
    win(store, new, max_late_ms=25_000, history_size=1)
    assert slots(store.runs(JOB, limit=100)) == [new, now - 20_000, now - 30_000]


def test_history_never_deletes_running_runs(store: Store) -> None:
    """Running runs are never pruned, however old and whatever history_size."""
    now = store.now_ms()
    s_running = now - 200_000
    running = win(store, s_running, max_late_ms=300_000, lease_ms=LONG)
    finished = [now - 190_000, now - 180_000]
    for slot in finished:
        run = win(store, slot, max_late_ms=300_000, overlap="allow")
        assert store.finish(JOB, slot, run.token, "success")

    new = recent(store, 1_000)
    win(store, new, max_late_ms=0, history_size=0, overlap="allow")
    assert slots(store.runs(JOB, limit=100)) == [new, s_running]
    assert stored(store, JOB, s_running) == running


def test_history_never_deletes_the_newest_run(store: Store) -> None:
    """The job's newest run is kept, even finished, old and beyond history_size, whatever claims follow."""
    now = store.now_ms()
    old = [now - 200_000, now - 190_000]
    _finished_runs(store, JOB, old, max_late_ms=300_000)
    newest = stored(store, JOB, old[-1])
    opts = dict(max_late_ms=0, history_size=0)
    assert claim(store, old[0], reason="takeover", **opts).outcome == "done"
    assert claim(store, old[-1], reason="takeover", **opts).outcome == "done"
    assert claim(store, now - 100_000, **opts).outcome == "late"
    assert claim(store, now - 300_000, reason="takeover", **opts).outcome == "none"
    assert stored(store, JOB, old[-1]) == newest
    assert store.jobs() == [JOB]


def test_history_pruning_is_per_job(store: Store) -> None:
    """Pruning one job's history never deletes another job's runs."""
    now = store.now_ms()
    old = [now - 200_000 + i * 10_000 for i in range(4)]
    _finished_runs(store, JOB, old, max_late_ms=300_000)
    _finished_runs(store, "other", old, max_late_ms=300_000)
    before = store.runs("other", limit=100)

    win(store, recent(store), max_late_ms=0, history_size=0)
    assert len(store.runs(JOB, limit=100)) == 1
    assert store.runs("other", limit=100) == before
    assert len(before) == 4


# -- job names --------------------------------------------------------------------------------------

NAMES = [
    "a", "A", "b", "ab", "a:b", "a:b:c", "b:a", "{a}", "a}", "{a", "{a}:b", "a{b}c",
    "α/β", "a b", "a\nb", "a\tb", " a", "a ", "a\\b", "a/b", "a.b",
    "a%", "%", "a_", "_", "a*", "*", "a?", "[a]",  # LIKE and glob wildcards
    "é", "e\u0301", "🕐", "x" * 300, "x" * 299,
    "'; DROP TABLE x; --", "a'b", 'a"b', "runs", "leasecron_runs",
]


def test_job_names_with_any_characters_are_kept_apart(store: Store) -> None:
    """Jobs are told apart by their exact names: every name wins its own run; acting on one never touches another."""
    assert len(set(NAMES)) == len(NAMES)
    slot = recent(store)
    won = {}
    for name in NAMES:
        run = win(store, slot, job=name, runner=f"runner-{len(won)}", lease_ms=LONG)
        assert run.job == name
        won[name] = run
    assert len({r.token for r in won.values()}) == len(NAMES)
    assert store.jobs() == sorted(NAMES)

    finished, renewed = NAMES[0], NAMES[1]
    assert store.finish(finished, slot, won[finished].token, "failed", error="only this one")
    assert store.heartbeat(renewed, slot, won[renewed].token, 60_000)
    for name in NAMES:
        run = stored(store, name, slot)
        assert run.job == name
        assert store.runs(name) == [run]
        if name == finished:
            assert run.status == "failed" and run.error == "only this one"
            assert store.unfinished(name) == []
        elif name == renewed:
            assert run.lease_end_ms > won[name].lease_end_ms
            assert run.token == won[name].token and run.status == "running"
        else:
            assert run == won[name]
            assert store.unfinished(name) == [run]
        # A token of one job never acts on another's run at the same slot.
        other = NAMES[(NAMES.index(name) + 1) % len(NAMES)]
        assert store.heartbeat(name, slot, won[other].token, 60_000) is False
    assert store.jobs() == sorted(NAMES)


# -- bad input -------------------------------------------------------------------------------------

BAD_CLAIMS = [
    ("job", ""),
    ("job", None),
    ("job", 5),
    ("job", b"job"),
    ("slot_ms", -1),
    ("slot_ms", 1.5),
    ("slot_ms", True),
    ("slot_ms", "1000"),
    ("runner", ""),
    ("runner", None),
    ("reason", "cron"),
    ("reason", None),
    ("lease_ms", -1),
    ("lease_ms", 0),
    ("lease_ms", True),
    ("lease_ms", 1.5),
    ("max_attempts", 0),
    ("max_attempts", True),
    ("max_attempts", -3),
    ("max_late_ms", -1),
    ("max_late_ms", False),
    ("overlap", "queue"),
    ("overlap", None),
    ("history_size", -1),
    ("history_size", True),
    ("token", ""),
    ("token", 5),
    ("token", b"token"),
    ("token", "to\x00ken"),
    ("token", "to\ud800ken"),
]


@pytest.mark.parametrize("arg,value", BAD_CLAIMS, ids=[f"{a}={v!r}" for a, v in BAD_CLAIMS])
def test_claim_rejects_bad_arguments(store: Store, arg: str, value: Any) -> None:
    """A claim with a bad argument raises ConfigError (a ValueError) naming it, and stores nothing."""
    slot = recent(store)
    kwargs: dict = dict(
        runner="r1", reason="schedule", lease_ms=1_000, max_attempts=3, max_late_ms=0,
        overlap="skip", history_size=10,
    )
    job: Any = JOB
    if arg == "job":
        job = value
    elif arg == "slot_ms":
        slot = value
    else:
        kwargs[arg] = value
    with pytest.raises(leasecron.ConfigError) as info:
        store.claim(job, slot, **kwargs)
    assert isinstance(info.value, ValueError)
    assert arg in str(info.value)
    assert store.jobs() == []


BAD_TOKEN_CALLS = [
    ("job", ""),
    ("job", None),
    ("slot_ms", -1),
    ("slot_ms", True),
    ("token", None),
    ("token", 5),
]


@pytest.mark.parametrize("arg,value", BAD_TOKEN_CALLS, ids=[f"{a}={v!r}" for a, v in BAD_TOKEN_CALLS])
@pytest.mark.parametrize("operation", ["heartbeat", "finish", "release"])
def test_token_operations_reject_bad_arguments(store: Store, operation: str, arg: str, value: Any) -> None:
    """heartbeat, finish and release with a bad job, slot or token raise ConfigError naming it, changing nothing."""
    slot = recent(store)
    run = win(store, slot)
    args: dict = {"job": JOB, "slot_ms": slot, "token": run.token}
    args[arg] = value
    call = {
        "heartbeat": lambda: store.heartbeat(args["job"], args["slot_ms"], args["token"], 1_000),
        "finish": lambda: store.finish(args["job"], args["slot_ms"], args["token"], "success"),
        "release": lambda: store.release(args["job"], args["slot_ms"], args["token"]),
    }[operation]
    with pytest.raises(leasecron.ConfigError) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert arg in str(info.value)
    assert stored(store, JOB, slot) == run
    assert store.jobs() == [JOB]


@pytest.mark.parametrize("lease_ms", [0, -1, True, 1.5, "1000", None])
def test_heartbeat_rejects_bad_lease_ms(store: Store, lease_ms: Any) -> None:
    """heartbeat with a lease_ms that is not a positive integer raises ConfigError naming it, changing nothing."""
    slot = recent(store)
    run = win(store, slot)
    with pytest.raises(leasecron.ConfigError, match="lease_ms"):
        store.heartbeat(JOB, slot, run.token, lease_ms)
    assert stored(store, JOB, slot) == run


@pytest.mark.parametrize("error", [123, b"bytes", ValueError("boom")])
def test_finish_rejects_an_error_that_is_not_text(store: Store, error: Any) -> None:
    """finish with an error that is neither None nor a string raises ConfigError naming it, changing nothing."""
    slot = recent(store)
    run = win(store, slot)
    with pytest.raises(leasecron.ConfigError, match="error"):
        store.finish(JOB, slot, run.token, "failed", error=error)
    assert stored(store, JOB, slot) == run


# -- lifecycle -------------------------------------------------------------------------------------


def _count_closes(handle: Store, monkeypatch: pytest.MonkeyPatch) -> List[bool]:
    """Record every call of ``handle.close`` (and still close)."""
    closed: List[bool] = []
    real_close = handle.close

    def close() -> None:
        closed.append(True)
        real_close()

    monkeypatch.setattr(handle, "close", close)
    return closed


def test_store_is_a_context_manager_that_closes(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store used in a with-block is returned by __enter__ and closed on exit; what it wrote stays stored."""
    handle = backend.open()
    closed = _count_closes(handle, monkeypatch)
    with handle as entered:
        assert entered is handle
        slot = recent(entered)
        run = win(entered, slot)
        assert closed == []
    assert closed == [True]
    monkeypatch.undo()
    assert backend.open().get_run(JOB, slot) == run


def test_store_closes_when_the_with_block_raises(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store used in a with-block is closed when the block raises, and the exception propagates."""
    handle = backend.open()
    closed = _count_closes(handle, monkeypatch)
    with pytest.raises(KeyError):
        with handle:
            raise KeyError("x")
    assert closed == [True]


def _fields(run: Run) -> dict:
    return {
        f: getattr(run, f)
        for f in (
            "job", "slot_ms", "attempt", "token", "runner", "status", "lease_end_ms",
            "handed_over", "reason", "error", "started_ms", "finished_ms", "attempts",
        )
    }
