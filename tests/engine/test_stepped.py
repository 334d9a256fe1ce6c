"""The engine's decisions, stepped on a clock the test moves (tests/engine/stepped.py): catch-up
on start, the skips (late, early, overlap), a backup's checks, a claim's jitter, and a stalled
scheduler. Each runs in milliseconds, with no thread and no wall clock, and passes or fails the
same way every time (the random things, a backup's delay of 1-2 heartbeats and a claim's jitter,
are checked within their bounds).

The protocol is docs/protocol.rst's ("Start-up: catch-up", "Late and early claims", the words
"backup" and "hand-over"). Where the subject is timing itself (how soon a takeover comes after a
lease ends, the jitter on a real host, threads and store round trips), the tests run real
instances on every store instead: test_catch_up.py, test_takeover.py, test_overlap.py,
test_clock.py, test_schedules.py.
"""

from __future__ import annotations

import logging
from typing import List, Tuple

import pytest

from leasecron.stored import Poll
from leasecron import LeaseCron, MemoryStore, Store, StoreUnavailable
from leasecron.controls import ManualRequest
from leasecron.engine.store_calls import BACKOFF_FIRST_S
from leasecron.events import slot_text
from leasecron.runs import Claim
from leasecron.stores import ClaimRequest, DelegatingStore
from tests.engine.stepped import ManualTime, Stepped, advance_together, at
from tests.engine.support import (
    CATCH_UP_HOUR,
    HEARTBEAT,
    HOURLY,
    CountingPolls,
    dead_claim,
    request_states,
    stored,
)

pytestmark = pytest.mark.timeout(30)


class ClaimLog(MemoryStore):
    """A memory store that notes every claim: (reason, slot_ms, the store's time), and its job."""

    def __init__(self, time: ManualTime) -> None:
        super().__init__(clock=time.store_ms)
        self.claims: List[Tuple[str, int, int]] = []
        self.claimed_jobs: List[str] = []

    def _claim(self, request: ClaimRequest) -> Claim:
        self._note(request)
        return super()._claim(request)

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        if len(requests) > 1:  # a batch of one is sent as a claim (noted there)
            for request in requests:
                self._note(request)
        return super()._claim_many(requests)

    def _note(self, request: ClaimRequest) -> None:
        self.claims.append((str(request.reason), request.slot_ms, self.now_ms()))
        self.claimed_jobs.append(request.job)

    def takeovers(self, slot_ms: int) -> List[int]:
        """When each takeover claim of ``slot_ms`` was made (store ms)."""
        return [now for reason, slot, now in self.claims if reason == "takeover" and slot == slot_ms]


def logged(start_ms: int) -> Tuple[Stepped, ClaimLog]:
    """An instance whose store notes its claims."""
    time = ManualTime(start_ms)
    store = ClaimLog(time)
    return Stepped(start_ms, time=time, store=store), store


# -- catch-up on start -----------------------------------------------------------------------


def test_an_expired_unfinished_run_that_is_still_the_latest_is_claimed_at_boot() -> None:
    """Catch-up, unfinished runs: an expired run of the latest slot is claimed as the next attempt
    in the boot step itself, not after a backup's first check."""
    s = Stepped(at(1800))
    dead = dead_claim(s.store, "job", at(0), 1)
    s.time.advance(5)
    s.boot(s.job(HOURLY, catch_up_ms=CATCH_UP_HOUR))
    assert s.started() == [{"slot_ms": at(0), "attempt": 2, "reason": "takeover"}]
    run = stored(s.store, "job", at(0))
    assert (run.status, run.attempt, run.runner) == ("success", 2, "a") and run.token != dead.token
    s.stop()


def test_an_unfinished_run_with_a_live_lease_is_backed_up_and_taken_over_when_it_ends() -> None:
    """Catch-up, unfinished runs: a run whose lease is alive is backed up, not claimed; a backup's
    check takes it over within two heartbeats of the lease's end."""
    s = Stepped(at(1800))
    dead = dead_claim(s.store, "job", at(0), 800)
    s.boot(s.job(HOURLY, catch_up_ms=CATCH_UP_HOUR))
    s.advance_to(dead.lease_end_ms - 1)
    assert s.started() == [] and stored(s.store, "job", at(0)).token == dead.token
    s.advance(2 * HEARTBEAT + 1)
    assert s.started() == [{"slot_ms": at(0), "attempt": 2, "reason": "takeover"}]
    (start,) = s.of("start")
    assert start.run is not None and dead.lease_end_ms <= start.run.started_ms <= dead.lease_end_ms + 2 * HEARTBEAT + 1
    s.stop()


@pytest.mark.parametrize("catch_up_ms", [CATCH_UP_HOUR, 0])
def test_an_expired_unfinished_run_with_a_newer_slot_due_is_left_alone(catch_up_ms: int) -> None:
    """Catch-up, unfinished runs: an expired run with a newer slot due is not claimed; with
    catch-up the newer slot runs and interrupts it, without catch-up it stays as it is."""
    s = Stepped(at(1800))
    old = dead_claim(s.store, "job", at(-3600), 1)
    s.time.advance(5)
    s.boot(s.job(HOURLY, catch_up_ms=catch_up_ms))
    s.advance(4 * HEARTBEAT)
    after = stored(s.store, "job", old.slot_ms)
    if catch_up_ms:
        assert s.started() == [{"slot_ms": at(0), "attempt": 1, "reason": "catch-up"}]
        assert (after.status, after.attempt, after.runner) == ("interrupted", 1, "dead")
    else:
        assert s.started() == []
        assert (after.status, after.attempt, after.token) == ("running", 1, old.token)
    s.stop()


def test_catch_up_ms_zero_claims_no_missed_slot() -> None:
    """With catch_up_ms=0 a starting instance claims nothing before the next slot."""
    s = Stepped(at(1800))
    s.boot(s.job(HOURLY, catch_up_ms=0))
    s.advance(1_000)
    assert s.events == [] and s.store.runs("job") == []
    s.stop()


@pytest.mark.parametrize("catch_up_ms, caught_up", [(1_199, False), (1_201, True)])
def test_the_latest_slot_is_caught_up_only_if_due_less_than_catch_up_ms_ago(catch_up_ms: int, caught_up: bool) -> None:
    """The latest slot, due 1.2 s before the start, is caught up when catch_up_ms is more than that."""
    s = Stepped(at(1.2))
    s.boot(s.job(2, catch_up_ms=catch_up_ms))
    s.advance(700)  # the next slot, at(2), is not due yet
    assert s.started() == ([{"slot_ms": at(0), "attempt": 1, "reason": "catch-up"}] if caught_up else [])
    assert (s.store.get_run("job", at(0)) is not None) is caught_up
    s.stop()


def test_only_the_latest_missed_slot_is_caught_up() -> None:
    """After slots went by with no instance running, only the latest of them is caught up; then
    the schedule goes on."""
    s = Stepped(at(0))
    first = s.store.claim("job", at(0), runner="earlier", lease_ms=500)
    assert first.run is not None and s.store.finish("job", at(0), first.run.token, "success")
    s.time.advance(3_400)  # slots at(1), at(2), at(3) pass with nobody running
    s.boot(s.job(1))  # catch_up_ms: the default, 300 s
    assert s.started() == [{"slot_ms": at(3), "attempt": 1, "reason": "catch-up"}]
    s.advance_to(at(4.1))
    assert s.started()[1:] == [{"slot_ms": at(4), "attempt": 1, "reason": "schedule"}]
    assert sorted(r.slot_ms for r in s.store.runs("job")) == [at(0), at(3), at(4)]
    s.stop()


# -- skipped claims ----------------------------------------------------------------------------


class AnswerLost(DelegatingStore):
    """Decides the first ``lost`` claims and then loses their answers (StoreUnavailable), as a
    timeout after the store ran them would; the tries are noted (token, the instance's time)."""

    def __init__(self, inner: Store, lost: int) -> None:
        super().__init__(inner)
        self.lost = lost
        self.tries: List[Tuple[str, int]] = []

    def _claim(self, request: ClaimRequest) -> Claim:
        claim = super()._claim(request)
        self.tries.append((str(request.token), self.inner.now_ms()))
        if len(self.tries) <= self.lost:
            raise StoreUnavailable("the answer was lost")
        return claim


def test_a_claim_whose_answer_was_lost_is_retried_on_the_instances_clock_and_wins_the_same_attempt() -> None:
    """Every wait of the engine is on the clock it is given: a claim's retries after lost answers
    pass on the stepped time (a backoff each), with the claim's one token, and win attempt 1 (rule 2)."""
    time = ManualTime(at(0.5))
    store = AnswerLost(MemoryStore(clock=time.store_ms), lost=2)
    s = Stepped(at(0.5), time=time, store=store)
    s.boot(s.job(1, catch_up_ms=0, jitter_ms=0))
    s.advance_to(at(1))
    assert s.started() == [{"slot_ms": at(1), "attempt": 1, "reason": "schedule"}]
    (token, first), (_, second), (_, third) = store.tries
    assert {t for t, _ in store.tries} == {token} and stored(s.store, "job", at(1)).token == token
    assert second - first >= BACKOFF_FIRST_S * 1000 and third - second >= 2 * BACKOFF_FIRST_S * 1000
    s.stop()


def test_each_scheduled_claim_waits_its_own_random_jitter_within_jitter_ms() -> None:
    """Before a scheduled claim the instance waits a uniform random delay in [0, jitter_ms], drawn
    for each claim: on the stepped clock every claim of a slot is made within that bound, to the
    millisecond, and the claims of one slot do not all wait alike."""
    jitter = 300
    s, store = logged(at(0.5))
    names = [f"job{i}" for i in range(12)]
    s.boot(*(s.job(1, name=name, catch_up_ms=0, jitter_ms=jitter) for name in names))
    s.advance_to(at(3))
    for slot in (at(1), at(2)):
        delays = [now - slot for reason, slot_ms, now in store.claims if slot_ms == slot]
        assert len(delays) == len(names) and all(0 <= d <= jitter for d in delays), delays
        assert max(delays) - min(delays) > 30, f"no jitter: {delays}"
    assert {reason for reason, _, _ in store.claims} == {"schedule"}
    s.stop()


def test_a_claim_refused_as_late_emits_skip_late_and_later_slots_run() -> None:
    """A newer slot already has a run: the claim is late (skip, reason late), creates no run, and
    the slot after that newer one runs as usual."""
    s = Stepped(at(0.5))
    s.boot(s.job(1, catch_up_ms=0))
    s.advance_to(at(1.5))
    newer = s.store.claim("job", at(3), runner="other", lease_ms=5_000)  # another instance, its clock ahead
    assert newer.run is not None and s.store.finish("job", at(3), newer.run.token, "success")
    s.advance_to(at(4.1))
    assert [(e.reason, e.slot_ms, e.run.slot_ms if e.run else None) for e in s.of("skip")] == [("late", at(2), at(3))]
    assert s.store.get_run("job", at(2)) is None
    assert [e["slot_ms"] for e in s.started()] == [at(1), at(4)]
    assert stored(s.store, "job", at(3)).runner == "other"
    s.stop()


def test_a_store_clock_stepping_back_gives_skip_early_and_the_slot_runs_when_due_on_it() -> None:
    """The store's clock steps back 10.4 s: the next claim is early (skip, reason early), the clock
    is read again, and the slot is claimed again when the store's clock reaches it."""
    s = Stepped(at(0.5))
    s.boot(s.job(1, catch_up_ms=0))
    s.advance_to(at(1.5))
    s.time.step_store(-10_400)
    s.advance(600)  # at(2) on the old estimate of the store's clock
    (skip,) = s.of("skip")
    assert (skip.reason, skip.slot_ms, skip.run) == ("early", at(2), None)
    assert abs(s.clock.now_ms() - s.store.now_ms()) <= 1  # read again
    s.advance_to(at(2) - 1)
    assert [e["slot_ms"] for e in s.started()] == [at(1)]
    s.advance(1)
    assert s.started()[1:] == [{"slot_ms": at(2), "attempt": 1, "reason": "schedule"}]
    assert stored(s.store, "job", at(2)).started_ms == at(2)
    s.advance_to(at(3.1))
    assert [e["slot_ms"] for e in s.started()] == [at(1), at(2), at(3)]
    assert [e.reason for e in s.of("skip")] == ["early"]
    s.stop()


def test_overlap_skips_the_next_slot_backs_up_both_and_takes_the_earlier_run_over() -> None:
    """overlap="skip": the next slot, due while an earlier run holds its lease, is skipped
    (reason overlap, with that run); both are backed up; the earlier run is taken over once its
    lease ends; the skipped slot never runs."""
    s, store = logged(at(0.5))
    s.boot(s.job(1, catch_up_ms=0))
    s.time.advance(100)
    dead = dead_claim(store, "job", at(1), 1_700)  # the runner of at(1) dies; its lease outlives at(2)
    s.advance_to(at(2.1))
    (skip,) = s.of("skip")
    assert (skip.reason, skip.slot_ms) == ("overlap", at(2))
    assert skip.run is not None and (skip.run.slot_ms, skip.run.runner) == (at(1), "dead")
    s.advance(4 * HEARTBEAT)
    assert store.takeovers(at(2)) != []  # the skipped slot is backed up too
    s.advance_to(dead.lease_end_ms + 2 * HEARTBEAT + 1)
    assert s.started() == [{"slot_ms": at(1), "attempt": 2, "reason": "takeover"}]
    s.advance_to(at(3.1))
    assert [e["slot_ms"] for e in s.started()] == [at(1), at(3)]
    assert s.store.get_run("job", at(2)) is None
    s.stop()


def test_a_dead_earlier_run_does_not_block_the_next_slot() -> None:
    """A run the instance never saw, whose runner died, does not block the next slot: it starts,
    and the dead run is interrupted (superseded), not retried; nothing is skipped."""
    s = Stepped(at(0.5))
    s.boot(s.job(1, catch_up_ms=0))
    s.advance_to(at(1.2))
    dead_claim(s.store, "job", at(1.5), 1)
    s.advance_to(at(2.1))
    assert s.started()[1:] == [{"slot_ms": at(2), "attempt": 1, "reason": "schedule"}]
    old = stored(s.store, "job", at(1.5))
    assert (old.status, old.attempt, old.runner) == ("interrupted", 1, "dead") and "superseded" in (old.error or "")
    assert s.of("skip") == []
    s.stop()


# -- a backup's checks ---------------------------------------------------------------------------


def test_a_backup_checks_every_one_to_two_heartbeats_while_the_run_lives_and_stops_when_it_ends() -> None:
    """A backup's takeover claims come a uniform 1-2 heartbeats apart while the run is running
    elsewhere; once it ended, one more check sees it done, and none follows."""
    s, store = logged(at(1800))
    dead = dead_claim(store, "job", at(0), 10_000)
    s.boot(s.job(HOURLY, catch_up_ms=CATCH_UP_HOUR))
    s.advance(2_000)
    checks = store.takeovers(at(0))
    gaps = [b - a for a, b in zip([at(1800)] + checks, checks)]
    assert 2_000 // (2 * HEARTBEAT + 1) <= len(checks) <= 2_000 // HEARTBEAT, checks
    assert all(HEARTBEAT <= gap <= 2 * HEARTBEAT + 1 for gap in gaps), gaps
    assert store.finish("job", at(0), dead.token, "success")
    s.advance(2 * HEARTBEAT + 1)
    assert len(store.takeovers(at(0))) == len(checks) + 1
    s.advance(1_000)
    assert len(store.takeovers(at(0))) == len(checks) + 1 and s.started() == []
    s.stop()


def test_a_backup_of_a_slot_with_no_run_stops_once_a_claim_of_it_would_be_late() -> None:
    """A skipped slot that nobody claimed is backed up (its checks answer none) until the store's
    clock passes slot + max_late_ms + 10 s, and not after."""
    s, store = logged(at(0.5))
    s.boot(s.job(1, catch_up_ms=0, max_late_ms=0))
    s.time.advance(100)
    dead_claim(store, "job", at(1), 30_000)  # a long run: at(2) and the slots after it are skipped
    s.advance_to(at(12) + 2 * HEARTBEAT + 1)
    checks = store.takeovers(at(2))
    assert checks[-2] <= at(12) < checks[-1], (checks[-2:], at(12))
    s.advance(1_000)
    assert store.takeovers(at(2)) == checks
    assert s.store.get_run("job", at(2)) is None
    s.stop()


@pytest.mark.parametrize("max_attempts, taken_over", [(2, False), (3, True)])
def test_max_attempts_counts_dead_runners(max_attempts: int, taken_over: bool) -> None:
    """Two attempts ended by dead runners: with max_attempts=2 the backup's check interrupts the
    run and nothing starts; with 3 the backup runs attempt 3."""
    s = Stepped(at(1800))
    first = dead_claim(s.store, "job", at(0), 1, runner="dead-1")
    s.time.advance(5)
    second = s.store.claim("job", at(0), runner="dead-2", reason="takeover", lease_ms=500)
    assert second.run is not None and second.run.attempt == 2 and first.attempt == 1
    s.boot(s.job(HOURLY, max_attempts=max_attempts))
    s.advance(500 + 3 * HEARTBEAT)
    run = stored(s.store, "job", at(0))
    if taken_over:
        assert s.started() == [{"slot_ms": at(0), "attempt": 3, "reason": "takeover"}]
        assert (run.status, run.attempt) == ("success", 3)
    else:
        assert s.started() == []
        assert (run.status, run.attempt) == ("interrupted", 2) and "max_attempts" in (run.error or "")
        assert run.finished_ms is not None and run.finished_ms >= second.run.lease_end_ms
    s.stop()


# -- the scheduler ---------------------------------------------------------------------------------


def test_a_stalled_scheduler_claims_the_overdue_slot_and_then_only_the_latest() -> None:
    """The process stalled for five slots: the slot that was due is claimed, then only the latest
    one (not every slot in between), and the schedule goes on from there."""
    s = Stepped(at(0.5))
    s.boot(s.job(1, catch_up_ms=0))
    s.advance_to(at(1.1))
    s.time.advance(5_000)  # nothing runs meanwhile: the scheduler thread stalled
    s.scheduler.run_due()
    assert [e["slot_ms"] for e in s.started()] == [at(1), at(2), at(6)]
    s.advance_to(at(7.1))
    assert [e["slot_ms"] for e in s.started()] == [at(1), at(2), at(6), at(7)]
    assert [s.store.get_run("job", at(n)) for n in (3, 4, 5)] == [None, None, None]
    assert s.of("skip") == []
    s.stop()


# -- pause, resume and manual runs (docs/protocol.rst, rules 16-19) ------------------------------------


class Listed(DelegatingStore):
    """A store whose ``pending_requests()`` answers the list the test sets (a poll's answer that is out
    of date by the time it is acted on), and that notes the slot of every manual claim sent."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.requests: List[ManualRequest] = []
        self.manual_claims: List[int] = []

    def _pending_requests(self) -> List[ManualRequest]:
        return list(self.requests)

    def _poll(self, since: int) -> Poll:
        return Poll(list(self.requests), super()._schedule_changes(since))

    def _claim(self, request: ClaimRequest) -> Claim:
        if request.reason == "manual":
            self.manual_claims.append(request.slot_ms)
        return super()._claim(request)


def test_a_paused_job_skips_each_new_slot_on_every_instance_and_resume_runs_the_next_one() -> None:
    """Rules 16 and 18: while the job is paused, each new slot is answered paused on both instances
    (skip, reason paused; no run); after resume the next slot runs, and the skipped slots are not
    caught up."""
    a = Stepped(at(0.5))
    b = a.peer("b")
    for s in (a, b):
        s.boot(s.job(1, catch_up_ms=0))
    advance_together(600, a, b)  # at(1.1)
    assert len(a.started() + b.started()) == 1
    a.store.pause("job", by="ops", note="vendor API down")
    advance_together(2_000, a, b)  # at(3.1)
    for s in (a, b):
        assert s.skipped() == [{"job": "job", "slot_ms": at(n), "reason": "paused"} for n in (2, 3)]
        assert [e.run for e in s.of("skip")] == [None, None]
    a.store.resume("job", by="ops")
    advance_together(2_000, a, b)  # at(5.1)
    assert sorted(e["slot_ms"] for s in (a, b) for e in s.started()) == [at(1), at(4), at(5)]
    assert sorted(r.slot_ms for r in a.store.runs("job")) == [at(1), at(4), at(5)]
    assert len(a.skipped()) == len(b.skipped()) == 2
    a.stop()
    b.stop()


def test_a_paused_jobs_unfinished_run_is_still_taken_over() -> None:
    """Rule 16: pausing does not touch a run already running; a backup takes it over when its
    runner died, as for a job that is not paused."""
    s = Stepped(at(1800))
    dead = dead_claim(s.store, "job", at(0), 800)
    s.boot(s.job(HOURLY, catch_up_ms=0))
    s.store.pause("job", by="ops")
    s.advance_to(dead.lease_end_ms + 2 * HEARTBEAT + 1)
    assert s.started() == [{"slot_ms": at(0), "attempt": 2, "reason": "takeover"}]
    assert stored(s.store, "job", at(0)).status == "success" and s.of("skip") == []
    s.stop()


def test_a_request_runs_once_across_instances_at_the_next_poll_with_reason_manual() -> None:
    """Rules 17 and 19: a request is found by the next poll (poll_ms after the last one) and run
    once, with reason manual, by the first instance that claims it; the others never claim it."""
    reasons: List[Tuple[str, str]] = []
    a = Stepped(at(0.5))
    b, c = a.peer("b"), a.peer("c")
    for s in (a, b, c):
        s.boot(s.job(HOURLY, lambda ctx: reasons.append((ctx.reason, ctx.runner)), catch_up_ms=0))
    advance_together(1, a, b, c)
    request = a.store.request_run("job", by="ops")
    advance_together(998, a, b, c)  # the instances polled at boot; the next poll is 1 s later
    assert [e for s in (a, b, c) for e in s.events] == []
    advance_together(1, a, b, c)
    assert a.started() == [{"slot_ms": request.slot_ms, "attempt": 1, "reason": "manual"}]
    advance_together(3_000, a, b, c)
    assert [len(s.events) for s in (a, b, c)] == [2, 0, 0]  # a's start and success
    assert reasons == [("manual", "a")]
    run = stored(a.store, "job", request.slot_ms)
    assert (run.status, run.reason, run.runner) == ("success", "manual", "a")
    assert request_states(a.store) == [(request.slot_ms, "claimed")]
    for s in (a, b, c):
        s.stop()


@pytest.mark.parametrize("jobs", [1, 50])
def test_one_poll_per_poll_ms_whatever_the_number_of_jobs(jobs: int) -> None:
    """An instance polls (requests and schedules) once at boot and then once per poll_ms, for all of its jobs."""
    time = ManualTime(at(0.5))
    store = CountingPolls(MemoryStore(clock=time.store_ms))
    s = Stepped(at(0.5), time=time, store=store, poll_ms=250)
    s.boot(*[s.job(HOURLY, name=f"job-{n}", catch_up_ms=0) for n in range(jobs)])
    s.advance(10_000)
    assert store.polls == 1 + 10_000 // 250
    s.stop()


def test_a_paused_jobs_request_runs_all_the_same() -> None:
    """Rule 17: a paused job's scheduled slot is skipped, its request runs."""
    s = Stepped(at(0.5))
    s.boot(s.job(1, catch_up_ms=0))
    s.store.pause("job", by="ops")
    request = s.store.request_run("job", by="ops")
    s.advance(1_000)  # at(1.5): at(1) is answered paused; the poll at(1.5) finds the request
    assert s.skipped() == [{"job": "job", "slot_ms": at(1), "reason": "paused"}]
    assert s.started() == [{"slot_ms": request.slot_ms, "attempt": 1, "reason": "manual"}]
    s.stop()


def test_a_manual_run_obeys_overlap_skip() -> None:
    """Rule 17 with overlap="skip": a request made while a run of the job holds its lease is
    skipped (skip, reason overlap, with that run); the request's slot gets no run and is not backed
    up, and the live run is, and is taken over when its runner died."""
    s, store = logged(at(1800))
    dead = dead_claim(store, "job", at(0), 3_000)
    s.boot(s.job(HOURLY, catch_up_ms=0))
    request = store.request_run("job", by="ops")
    s.advance(1_000)
    assert s.skipped() == [{"job": "job", "slot_ms": request.slot_ms, "reason": "overlap"}]
    (skip,) = s.of("skip")
    assert skip.run is not None and skip.run.token == dead.token
    assert request_states(store) == [(request.slot_ms, "skipped")] and store.get_run("job", request.slot_ms) is None
    s.advance_to(dead.lease_end_ms + 2 * HEARTBEAT + 1)
    assert s.started() == [{"slot_ms": at(0), "attempt": 2, "reason": "takeover"}]
    assert store.takeovers(request.slot_ms) == []
    s.stop()


def test_with_overlap_allow_a_manual_run_starts_beside_a_live_run() -> None:
    """overlap="allow": a request runs while another run of the job holds its lease."""
    s = Stepped(at(1800))
    dead_claim(s.store, "job", at(0), 3_000)
    s.boot(s.job(HOURLY, catch_up_ms=0, overlap="allow"))
    request = s.store.request_run("job", by="ops")
    s.advance(1_000)
    assert s.started() == [{"slot_ms": request.slot_ms, "attempt": 1, "reason": "manual"}] and s.of("skip") == []
    s.stop()


def test_a_request_nobody_claims_expires_and_a_late_claim_of_it_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Rule 19: a request no instance claims is pending until max_late_ms + 10 s after its slot,
    then expired (no instance here has its job). A claim sent after that, from a poll's answer
    that was out of date, is answered late: the instance logs the expiry and emits nothing."""
    time = ManualTime(at(0.5))
    cron = LeaseCron(MemoryStore(clock=time.store_ms), runner="ops")
    cron.add_job(lambda: None, HOURLY, name="job", max_late_ms=1_000)
    slot = cron.trigger("job")  # an instance that never started
    listed = Listed(cron.store)
    s = Stepped(at(0.5), time=time, store=listed)
    s.boot(s.job(HOURLY, name="other", catch_up_ms=0))
    (request,) = cron.store.pending_requests()
    assert (request.slot_ms, request.requested_by, request.expires_ms) == (slot, "ops", slot + 11_000)
    s.advance_to(slot + 11_000)
    assert request_states(cron.store) == [(slot, "pending")]
    s.advance(1)
    assert request_states(cron.store) == [(slot, "expired")] and cron.store.pending_requests() == []
    assert s.events == [] and listed.manual_claims == []
    # an instance that has the job acts on an answer that still lists the request
    late = s.peer("late", store=listed)
    listed.requests = [request]
    caplog.set_level(logging.INFO, logger="leasecron")
    late.boot(late.job(HOURLY, catch_up_ms=0))
    line = f"leasecron: expired job 'job' slot {slot_text(slot)} runner 'late' (manual): the request expired:"
    (record,) = [r for r in caplog.records if r.getMessage().startswith(line)]
    assert record.levelno == logging.WARNING and "max_late_ms (1000 ms) + 10 s" in record.getMessage()
    assert late.events == [] and listed.manual_claims == [slot]
    s.stop()
    late.stop()


def test_a_request_is_claimed_once_by_an_instance_while_polls_still_list_it() -> None:
    """An instance claims a request once: a poll that lists it again after the claim was answered
    (here done: another instance ran it) sends no second claim, and the answer emits nothing."""
    a = Stepped(at(0.5))
    listed = Listed(a.store)
    b = a.peer("b", store=listed)
    for s in (a, b):
        s.boot(s.job(HOURLY, catch_up_ms=0))
    request = a.store.request_run("job", by="ops")
    advance_together(1_000, a, b)
    assert [e.type for e in a.events] == ["start", "success"]
    listed.requests = [request]
    advance_together(3_000, a, b)
    assert listed.manual_claims == [request.slot_ms] and b.events == []
    a.stop()
    b.stop()


def test_a_removed_job_is_no_longer_scheduled_backed_up_or_run_on_request() -> None:
    """Engine.remove (LeaseCron.remove_job): the job's slots stop here, its backups stop, its
    requests are left to other instances; the other jobs go on."""
    s, store = logged(at(0.5))
    removed, kept = s.job(1, name="job", catch_up_ms=0), s.job(1, name="other", catch_up_ms=0)
    s.boot(removed, kept)
    s.advance_to(at(1.1))
    dead = dead_claim(store, "job", at(1.5), 2_000)
    s.advance_to(at(2.1))  # at(2) overlaps the dead run: both are backed up
    assert [e["slot_ms"] for e in s.started()] == [at(1), at(1), at(2)]
    s.engine.remove(removed)
    claims = len(store.claims)
    request = store.request_run("job", by="ops")
    s.advance_to(dead.lease_end_ms + 3_000)
    assert set(store.claimed_jobs[claims:]) == {"other"}
    assert [e.job for e in s.of("start")][3:] == ["other"] * 4  # at(3) ... at(6)
    assert request_states(store) == [(request.slot_ms, "pending")]
    assert stored(store, "job", at(1.5)).token == dead.token  # never taken over here
    s.engine.add(s.job(1, name="job", catch_up_ms=0))  # registered again: scheduled, and its request run
    s.advance(1_000)
    started = [(e.job, e.slot_ms, e.reason) for e in s.of("start")][-3:]
    assert started[0] == ("job", request.slot_ms, "manual")
    assert sorted(started[1:]) == [("job", at(7), "schedule"), ("other", at(7), "schedule")]  # one batch, any order
    s.stop()
