"""Batches: the claims due in one pass of the scheduler thread, sent together (rule 21).

The scheduler thread hands each scheduled or catch-up claim to
:meth:`Batches.gather`; once its pass is over, the gathered claims go to the
claim pool cut into about two batches per pool thread, each instance in its
own shuffled order, so the first runs start while later batches are on their
way and the instances split the runs between them (``docs/performance.rst``,
"How an instance meets a slot boundary"). One claim alone is sent as a
single claim.
"""

from __future__ import annotations

import random
import threading
from typing import Set

from ..jobs import Job
from ..states import Reason
from .claims import BATCH_MAX, Batch, Claims
from .roles import Instance

__all__ = ["Batches", "BATCH_MAX", "BATCH_MIN", "batch_size"]

#: Claims due at once are spread over the pool's threads in batches of at least this many.
BATCH_MIN = 16


def batch_size(claims: int, threads: int) -> int:
    """How many claims each batch holds when ``claims`` fall due at once on ``threads`` pool threads:
    about two batches per thread, of :data:`BATCH_MIN` to :data:`BATCH_MAX` claims."""
    return min(BATCH_MAX, max(BATCH_MIN, -(-claims // (2 * threads))))


class Batches:
    """Gathers the claims of one pass of ``instance``'s scheduler thread and hands them to its claim
    pool as batches that ``claims`` sends; ``threads`` is the claim pool's size."""

    def __init__(self, instance: Instance, claims: Claims, threads: int) -> None:
        self._instance = instance
        self._claims = claims
        self._threads = threads
        self._lock = threading.Lock()
        self._gathered: Batch = []

    def gather(self, job: Job, slot_ms: int, reason: Reason) -> None:
        """In the scheduler thread: claim ``slot_ms`` of ``job`` with the other claims due in
        this pass (the first one gathered plans the flush after the pass, at delay 0)."""
        with self._lock:
            self._gathered.append((job, slot_ms, reason))
            first = len(self._gathered) == 1
        if first:
            self._instance.timers.call_later(0, self._flush)

    def _flush(self) -> None:
        """In the scheduler thread, after the pass: the gathered claims to the pool, in batches."""
        with self._lock:
            gathered, self._gathered = self._gathered, []
        random.shuffle(gathered)  # each instance its own order: the instances' batches split the runs
        gathered.sort(key=lambda claim: claim[1])  # stable: a job's slots in order, the jobs of a slot shuffled
        size = batch_size(len(gathered), self._threads)
        batch: Batch = []
        names: Set[str] = set()
        for claim in gathered:
            if len(batch) == size or claim[0].name in names:  # a job's later slot: in a later batch
                self._instance.tasks.submit(self._claims.claim_all, batch)
                batch, names = [], set()
            batch.append(claim)
            names.add(claim[0].name)
        self._instance.tasks.submit(self._claims.claim_all, batch)
