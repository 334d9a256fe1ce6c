"""MemoryStore: the store contract in one process's memory.

For tests, examples and single-process scripts: instances in one process
can share it, other processes cannot see it. It is a real store, running the
same rules (:mod:`leasecron.stores.rules`) as SQLite, under one lock, on the
process clock.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..runs import Status
from .records import Record
from .rules import Table, TableStore

__all__ = ["MemoryStore"]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class _MemoryTable(Table):
    def __init__(self) -> None:
        self._runs: Dict[str, Dict[int, Record]] = {}

    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        record = self._runs.get(job, {}).get(slot_ms)
        return None if record is None else dataclasses.replace(record)

    def newest(self, job: str) -> Optional[Record]:
        slots = self._runs.get(job)
        return dataclasses.replace(slots[max(slots)]) if slots else None

    def running(self, job: str) -> List[Record]:
        runs = self._runs.get(job, {})
        return [dataclasses.replace(runs[s]) for s in sorted(runs) if runs[s].status == Status.RUNNING]

    def _running_before(self, job: str, before_ms: int) -> List[Record]:
        runs = self._runs.get(job, {})
        return [runs[s] for s in sorted(runs) if s < before_ms and runs[s].status == Status.RUNNING]

    def live_before(self, job: str, before_ms: int, now_ms: int) -> Optional[Record]:
        alive = [r for r in self._running_before(job, before_ms) if r.lease_end_ms > now_ms]
        return dataclasses.replace(alive[-1]) if alive else None

    def interrupt_expired(self, job: str, before_ms: int, now_ms: int, why: str) -> None:
        for record in self._running_before(job, before_ms):
            if record.lease_end_ms <= now_ms:
                record.interrupt(now_ms, why)

    def latest(self, job: str, limit: int) -> List[Record]:
        slots = self._runs.get(job, {})
        return [dataclasses.replace(slots[s]) for s in sorted(slots, reverse=True)[:limit]]

    def jobs(self) -> List[str]:
        return sorted(self._runs)

    def insert(self, record: Record) -> None:
        self._runs.setdefault(record.job, {})[record.slot_ms] = dataclasses.replace(record)

    update = insert

    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        slots = self._runs.get(job, {})
        newest = max(slots)
        finished = sorted((s for s, r in slots.items() if r.status != Status.RUNNING), reverse=True)
        for slot in finished[keep:]:
            if slot < horizon_ms and slot != newest:
                del slots[slot]


class MemoryStore(TableStore):
    """The store contract in this process's memory (``memory://``).

    ``clock`` returns the store's time in epoch milliseconds; it defaults to
    the process's wall clock. A test may pass another clock, for example one
    that runs ahead of the host's, to show that instances fire on the
    store's clock.

    ``create`` is accepted for the signature every store shares
    (:func:`~leasecron.open_store`'s ``create=False``): a new memory store
    is empty, and creating it creates nothing outside this process.
    """

    kind = "memory"

    def __init__(self, clock: Optional[Callable[[], int]] = None, *, create: bool = True) -> None:
        self._clock = clock or _wall_ms
        self.create = create
        self._lock = threading.Lock()
        self._table = _MemoryTable()

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> "MemoryStore":
        """A new, empty store for ``memory://``."""
        return cls(create=create)

    def now_ms(self) -> int:
        return int(self._clock())

    @contextmanager
    def _write(self) -> Iterator[Tuple[Table, int]]:
        with self._lock:
            yield self._table, self.now_ms()

    @contextmanager
    def _read(self) -> Iterator[Table]:
        with self._lock:
            yield self._table

    def server_version(self) -> str:
        """``memory (this process)``: there is no server."""
        return "memory (this process)"

    def close(self) -> None:
        """Nothing to release: the runs stay in memory while the store lives."""

    def __repr__(self) -> str:
        return "MemoryStore()"
