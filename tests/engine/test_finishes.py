"""Finishes sent together (rule 25): the runs of an instance that end at the same time record their
ends in one round trip (``finish_many``), each as a single finish would; a batch that fails is sent
again finish by finish, and every run is still recorded once."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

from leasecron import StoreUnavailable
from leasecron.stores import DelegatingStore, Finish, Store
from tests.conftest import Backend
from tests.engine.conftest import MakeCron
from tests.engine.support import CATCH_UP_HOUR, HOURLY, Recorder
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(60)

#: Jobs whose handlers return at the same moment.
JOBS = 12


class SlowFinishes(DelegatingStore):
    """Each finish (alone or in a batch) takes 100 ms more: the runs that end meanwhile gather.
    ``fail_first_batch``: the first batch is decided, and its answer lost."""

    def __init__(self, inner: Store, fail_first_batch: bool = False) -> None:
        super().__init__(inner)
        self.alone: List[str] = []
        self.batches: List[List[str]] = []
        self._fail_first_batch = fail_first_batch
        self._lock = threading.Lock()

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: object = None) -> bool:
        time.sleep(0.1)
        with self._lock:
            self.alone.append(job)
        return super()._finish(job, slot_ms, token, status, error)  # type: ignore[arg-type]

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        time.sleep(0.1)
        with self._lock:
            self.batches.append([f.job for f in finishes])
            first = len(self.batches) == 1
        answers = super()._finish_many(finishes)
        if first and self._fail_first_batch:
            raise StoreUnavailable("the answer of the batch was lost")
        return answers


def start_together(make_cron: MakeCron, store: SlowFinishes) -> Recorder:
    """An instance whose JOBS hourly jobs run at once (catch-up) and return together."""
    cron = make_cron("a", store=store, catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    barrier = threading.Barrier(JOBS, timeout=10)
    for i in range(JOBS):
        cron.add_job(lambda: barrier.wait(), HOURLY, name=f"job-{i}")
    cron.start()
    wait_for(lambda: len(rec.of("success")) == JOBS, 10)
    return rec


def test_runs_that_end_together_finish_in_one_round_trip(make_cron: MakeCron, backend: Backend) -> None:
    """Twelve runs return at once while a finish takes 100 ms: one is sent alone and the others gather
    into batches (at most half as many round trips as runs, even when a loaded machine wakes a run
    thread late: 2 when none is late); every run is recorded success once."""
    store = SlowFinishes(backend.open())
    rec = start_together(make_cron, store)
    finished = store.alone + [job for batch in store.batches for job in batch]
    assert sorted(finished) == sorted(f"job-{i}" for i in range(JOBS))
    assert len(store.alone) + len(store.batches) <= JOBS // 2, (store.alone, store.batches)
    assert store.batches and max(len(batch) for batch in store.batches) >= 2
    for event in rec.of("success"):
        assert event.run is not None
        run = store.get_run(event.job or "", event.slot_ms or 0)
        assert run is not None and run.status == "success" and [a.outcome for a in run.attempts] == ["success"]


def test_a_batch_of_finishes_whose_answer_was_lost_is_sent_again_one_by_one(
    make_cron: MakeCron, backend: Backend
) -> None:
    """The store decided the first batch of finishes and its answer was lost: each of its finishes is
    sent again alone (answered false: decided already), found recorded, and reported success once;
    no run is lost."""
    store = SlowFinishes(backend.open(), fail_first_batch=True)
    rec = start_together(make_cron, store)
    assert store.batches
    assert set(store.batches[0]) <= set(store.alone)  # each finish of the failed batch, again alone
    assert rec.of("lost") == []
    assert sorted(e.job or "" for e in rec.of("success")) == sorted(f"job-{i}" for i in range(JOBS))
