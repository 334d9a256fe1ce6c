"""Claims sent together (rule 21): the claims due in one pass of the scheduler go to the store as
batches (``claim_many``), catch-up claims too; a claim alone is a single claim; a batch that fails
is sent again claim by claim, with the same tokens.

The stepped tests (one thread, a clock the test moves, a memory store) show which claims go in
which batch; the threaded test runs three real instances on every shared store and proves each
slot ran exactly once while they claimed in batches.
"""

from __future__ import annotations

import threading
import time
from typing import Any, List, Tuple

import pytest

from leasecron import Claim, LeaseCron, MemoryStore, Store, StoreUnavailable
from leasecron.engine.batches import BATCH_MAX, BATCH_MIN
from leasecron.stores import ClaimRequest, DelegatingStore
from tests.conftest import Backend
from tests.engine.conftest import MakeCron
from tests.engine.stepped import ManualTime, Stepped, at
from tests.engine.support import Recorder, wait_store_time
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(60)

Sent = Tuple[str, int, str]  # job, slot, reason


class Counting(DelegatingStore):
    """Notes every batch and every single claim that reaches the store (job, slot, reason)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.batches: List[List[Sent]] = []
        self.singles: List[Sent] = []
        self.tokens: List[str] = []
        self._lock = threading.Lock()

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        with self._lock:
            self.batches.append([(r.job, r.slot_ms, r.reason) for r in requests])
            self.tokens += [r.token or "" for r in requests]
        return super()._claim_many(requests)

    def _claim(self, request: ClaimRequest) -> Claim:
        with self._lock:
            self.singles.append((request.job, request.slot_ms, request.reason))
            self.tokens.append(request.token or "")
        return super()._claim(request)


class LosesFirstBatchAnswer(Counting):
    """The first batch is decided by the store, and its answer lost (StoreUnavailable)."""

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        answers = super()._claim_many(requests)
        if len(self.batches) == 1:
            raise StoreUnavailable("the answer of the batch was lost")
        return answers


def stepped(store_class: Any = Counting) -> Tuple[Stepped, Counting]:
    """An instance stepped from 0.5 s before a whole second, on a memory store wrapped in ``store_class``."""
    time = ManualTime(at(0.5))
    store = store_class(MemoryStore(clock=time.store_ms))
    return Stepped(at(0.5), time=time, store=store), store


def started(s: Stepped) -> List[Tuple[str, int, str, int]]:
    """The start events: job, slot, reason, attempt."""
    return [(e.job, e.slot_ms, e.reason, e.attempt) for e in s.of("start")]


def test_jobs_due_at_one_instant_are_claimed_in_one_batch() -> None:
    """Ten jobs on a 1 s interval: each slot's ten claims reach the store as one batch, in the
    order the jobs were added, and every slot starts a run; no single claim is sent."""
    s, store = stepped()
    names = [f"job-{i}" for i in range(10)]
    s.boot(*(s.job(1, name=name, catch_up_ms=0) for name in names))
    s.advance_to(at(2.1))
    assert [sorted(batch) for batch in store.batches] == [
        [(name, slot, "schedule") for name in names] for slot in (at(1), at(2))
    ]
    assert store.singles == []
    assert sorted(started(s)) == sorted((name, slot, "schedule", 1) for name in names for slot in (at(1), at(2)))
    s.stop()


def test_a_claim_due_alone_is_a_single_claim() -> None:
    """One job: its claims are single claims, not batches of one."""
    s, store = stepped()
    s.boot(s.job(1, catch_up_ms=0))
    s.advance_to(at(2.1))
    assert store.batches == [] and store.singles == [("job", at(1), "schedule"), ("job", at(2), "schedule")]
    s.stop()


def test_catch_up_claims_of_every_job_go_in_one_batch() -> None:
    """Five jobs booted 0.5 s after their slot, with catch-up: the five catch-up claims are one batch."""
    s, store = stepped()
    names = [f"job-{i}" for i in range(5)]
    s.boot(*(s.job(1, name=name, catch_up_ms=10_000) for name in names))
    s.advance(10)
    assert [sorted(batch) for batch in store.batches] == [[(name, at(0), "catch-up") for name in names]]
    assert sorted(started(s)) == [(name, at(0), "catch-up", 1) for name in names]
    s.stop()


@pytest.mark.parametrize(
    "count, sizes",
    [
        (10, [10]),  # fewer than BATCH_MIN: one batch
        (100, [16] * 6 + [4]),  # batches of BATCH_MIN
        (1_000, [125] * 8),  # twice as many batches as the pool's 4 threads
        (8 * BATCH_MAX + 44, [BATCH_MAX] * 8 + [44]),  # no batch over BATCH_MAX
    ],
)
def test_claims_due_at_once_are_spread_over_the_pool_in_batches(count: int, sizes: List[int]) -> None:
    """The claims of one pass go in batches of BATCH_MIN to BATCH_MAX, about twice as many as
    the claim pool's 4 threads, each job's claim in one of them; every job runs."""
    assert BATCH_MIN == 16
    s, store = stepped()
    names = [f"job-{i}" for i in range(count)]
    s.boot(*(s.job(1, name=name, catch_up_ms=0) for name in names))
    s.advance_to(at(1.1))
    assert [len(batch) for batch in store.batches] == sizes
    assert sorted(job for batch in store.batches for job, _, _ in batch) == sorted(names)
    assert len(started(s)) == count
    s.stop()


def test_a_batch_whose_answer_was_lost_is_sent_again_claim_by_claim_with_the_same_tokens() -> None:
    """The store decided the first batch and its answer was lost: each claim is sent again alone
    with its token and wins the attempt its batch won (attempt 1, not a second attempt); each
    run starts once."""
    s, store = stepped(LosesFirstBatchAnswer)
    names = [f"job-{i}" for i in range(4)]
    s.boot(*(s.job(1, name=name, catch_up_ms=0) for name in names))
    s.advance_to(at(1.1))
    assert [sorted(batch) for batch in store.batches] == [[(name, at(1), "schedule") for name in names]]
    assert store.singles == store.batches[0]  # each claim of the batch, alone, in the batch's order
    assert store.tokens[:4] == store.tokens[4:]  # the same token for the batch and the claim alone
    assert sorted(started(s)) == [(name, at(1), "schedule", 1) for name in names]
    for name in names:
        run = store.get_run(name, at(1))
        assert run is not None and [(a.number, a.outcome) for a in run.attempts] == [(1, "success")]
    s.stop()


def test_the_runs_a_batch_found_running_are_checked_together_and_taken_over_together() -> None:
    """Ten jobs every 10 s whose slot a runner that is gone claimed just before this instance (a live
    3 s lease): the batch of claims finds them running, and the backup checks all ten in one batch of
    takeover claims per check, never a single claim; once the leases ended, one such batch takes them
    all over."""
    s, store = stepped()
    names = [f"job-{i}" for i in range(10)]
    s.boot(*(s.job(10, name=name, catch_up_ms=0) for name in names))
    s.advance_to(at(10) - 1)
    s.time.advance(1)  # the slot is due: the runner that is gone claims it first
    for name in names:
        assert store.inner.claim(name, at(10), runner="gone", lease_ms=3_000).outcome == "won"
    s.advance_to(at(14))
    assert [sorted(batch) for batch in store.batches[:1]] == [[(name, at(10), "schedule") for name in names]]
    checks = store.batches[1:]
    assert len(checks) >= 2  # checked while the leases lived, then taken over
    assert all(sorted(batch) == [(name, at(10), "takeover") for name in names] for batch in checks)
    assert store.singles == []
    assert sorted(started(s)) == [(name, at(10), "takeover", 2) for name in names]
    s.stop()


def test_three_instances_claim_in_batches_and_run_each_slot_once(make_cron: MakeCron, backend: Backend) -> None:
    """Three instances, 30 jobs on a 1 s interval, on a shared store: for two slots, every job ran
    once per slot, and the claims reached the store in batches of more than one claim."""
    names = [f"job-{i}" for i in range(30)]
    crons = [make_cron(runner, store=Counting(backend.open()), catch_up_ms=0) for runner in "abc"]
    recs = [Recorder(cron) for cron in crons]
    for cron in crons:
        for name in names:
            cron.add_job(lambda: None, 1, name=name)
        cron.start()
    wait_for(lambda: all(cron.clock.synced for cron in crons), 5)
    first = (crons[0].store.now_ms() // 1000 + 1) * 1000
    wait_store_time(crons[0].store, first + 1_000 + 500)
    wait_for(lambda: not any(cron.live_runs() for cron in crons), 5)
    for slot in (first, first + 1_000):
        ran = sorted(e.job for rec in recs for e in rec.of("start") if e.slot_ms == slot)
        assert ran == sorted(names), (slot, [(e.type, e.job, e.slot_ms) for rec in recs for e in rec.of()][:10])
    sizes = [len(batch) for cron in crons for batch in cron.store.batches]  # type: ignore[attr-defined]
    assert sizes and max(sizes) > 1, sizes


@pytest.mark.parametrize("overlap", ["skip", "allow"])
def test_the_loser_of_a_claim_checks_no_run_that_a_later_slot_shows_ended(overlap: str) -> None:
    """Two instances, a job every second whose runs take 0.3 s, a heartbeat of 1.5 s (a backup
    checks 1.5-3 s after it began). With overlap="skip" the loser's claim of each next slot finds
    that slot's run started, so the earlier run ended: its backup ends without a takeover check,
    and over 4 slots none is sent. With overlap="allow" an earlier run may still be live: the
    backups check (and find the runs done)."""
    store = Counting(MemoryStore())
    crons = [
        LeaseCron(store, runner=runner, lease_ms=4_500, heartbeat_ms=1_500, jitter_ms=0, catch_up_ms=0,
                  overlap=overlap)
        for runner in "ab"
    ]  # fmt: skip
    recs = [Recorder(cron) for cron in crons]
    try:
        for cron in crons:
            cron.add_job(lambda: time.sleep(0.3), 1, name="job")
            cron.start()
        first = (store.now_ms() // 1000 + 1) * 1000
        wait_store_time(store, first + 4_000)
        takeovers = [sent for sent in store.singles if sent[2] == "takeover"]
        if overlap == "skip":
            assert takeovers == []
        else:
            assert takeovers, "the backups of overlap='allow' runs check them"
        ran = sorted(e.slot_ms for rec in recs for e in rec.of("start"))
        assert ran == sorted(set(ran)) and all(slot in ran for slot in range(first, first + 3_000, 1_000))
    finally:
        for cron in crons:
            cron.stop(timeout=2)
