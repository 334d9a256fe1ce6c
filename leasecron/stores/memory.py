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
from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..controls import JobState, ManualRequest
from ..states import RequestState, Status
from ..stored import FINISHED_STATUSES, ScheduleChanges, StoredSchedule
from .records import Record
from .rules import TableStore
from .table import NewSlot, Table

__all__ = ["MemoryStore"]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class _MemoryTable(Table):
    def __init__(self) -> None:
        self._runs: Dict[str, Dict[int, Record]] = {}
        self._pauses: Dict[str, JobState] = {}
        self._requests: Dict[str, Dict[int, ManualRequest]] = {}
        #: The index of open requests: pending, or claimed (kept until they expire).
        self._pending: Dict[Tuple[int, str], ManualRequest] = {}
        #: Each job's stored schedule with the cursor it was saved at, the newest change last.
        self._schedules: "OrderedDict[str, Tuple[int, StoredSchedule]]" = OrderedDict()
        self._cursor = 0
        #: Each runner's announcement: its body, started_ms and seen_ms.
        self._instances: Dict[str, Tuple[str, int, int]] = {}

    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        record = self._runs.get(job, {}).get(slot_ms)
        return None if record is None else dataclasses.replace(record)

    def newest(self, job: str) -> Optional[Record]:
        slots = self._runs.get(job)
        return dataclasses.replace(slots[max(slots)]) if slots else None

    def new_slot(self, job: str, slot_ms: int) -> NewSlot:
        scheduled = [s for s, r in self._runs.get(job, {}).items() if not r.manual]
        open_request = self._pending.get((slot_ms, job))
        requested = open_request is not None and open_request.state == RequestState.PENDING
        stored = self._schedules.get(job)
        version = stored[1].version if stored is not None else 0
        return NewSlot(job in self._pauses, max(scheduled) if scheduled else None, requested, version)

    def running(self, job: str) -> List[Record]:
        runs = self._runs.get(job, {})
        return [dataclasses.replace(runs[s]) for s in sorted(runs) if runs[s].status == Status.RUNNING]

    def latest(self, job: str, limit: int) -> List[Record]:
        slots = self._runs.get(job, {})
        return [dataclasses.replace(slots[s]) for s in sorted(slots, reverse=True)[:limit]]

    def recent(self, jobs: List[str], limit: int) -> Dict[str, List[Record]]:
        return {job: self.latest(job, limit) for job in jobs}

    def summaries(self, jobs: List[str]) -> Dict[str, Tuple[Record, Dict[str, int]]]:
        found = {}
        for job in jobs:
            slots = self._runs.get(job)
            if not slots:
                continue
            ends: Dict[str, int] = {}
            for record in slots.values():
                if record.status in FINISHED_STATUSES and record.finished_ms is not None:
                    ends[record.status] = max(ends.get(record.status, record.finished_ms), record.finished_ms)
            found[job] = (dataclasses.replace(slots[max(slots)]), ends)
        return found

    def jobs(self) -> List[str]:
        return sorted(self._runs)

    def insert(self, record: Record) -> None:
        self._runs.setdefault(record.job, {})[record.slot_ms] = dataclasses.replace(record)

    update = insert

    def renew(self, job: str, slot_ms: int, lease_end_ms: int) -> None:
        self._runs[job][slot_ms].lease_end_ms = lease_end_ms

    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        slots = self._runs.get(job, {})
        newest = max(slots)
        finished = sorted((s for s, r in slots.items() if r.status != Status.RUNNING), reverse=True)
        for slot in finished[keep:]:
            if slot < horizon_ms and slot != newest:
                del slots[slot]

    def pause(self, job: str) -> Optional[JobState]:
        return self._pauses.get(job)

    def pauses(self) -> List[JobState]:
        return list(self._pauses.values())

    def set_pause(self, state: JobState) -> None:
        self._pauses[state.job] = state

    def clear_pause(self, job: str) -> None:
        self._pauses.pop(job, None)

    def request(self, job: str, slot_ms: int) -> Optional[ManualRequest]:
        return self._requests.get(job, {}).get(slot_ms)

    def requests(self, job: Optional[str]) -> List[ManualRequest]:
        jobs = list(self._requests) if job is None else [job]
        found = [made for name in jobs for made in self._requests.get(name, {}).values()]
        return sorted(found, key=lambda made: (made.slot_ms, made.job))

    def pending(self, now_ms: int) -> List[ManualRequest]:
        for key in [key for key, open_request in self._pending.items() if open_request.expires_ms < now_ms]:
            del self._pending[key]  # expired: never listed again
        return [self._pending[key] for key in sorted(self._pending)]

    def add_request(self, request: ManualRequest) -> None:
        self._requests.setdefault(request.job, {})[request.slot_ms] = request
        self._pending[request.slot_ms, request.job] = request

    def end_request(self, job: str, slot_ms: int, state: str) -> None:
        made = self._requests.get(job, {}).get(slot_ms)
        if made is None or made.state != RequestState.PENDING:
            return
        ended = self._requests[job][slot_ms] = dataclasses.replace(made, state=state)
        if state == RequestState.CLAIMED:
            self._pending[slot_ms, job] = ended
        else:
            self._pending.pop((slot_ms, job), None)

    def prune_requests(self, job: str, keep: int, now_ms: int) -> None:
        kept = self._requests.get(job, {})
        ended = [s for s, r in kept.items() if r.state != RequestState.PENDING or r.expires_ms < now_ms]
        for slot in sorted(ended, reverse=True)[keep:]:
            del kept[slot]

    def schedule(self, job: str) -> Optional[StoredSchedule]:
        stored = self._schedules.get(job)
        return None if stored is None else stored[1]

    def save_schedule(self, record: StoredSchedule) -> None:
        self._cursor += 1
        self._schedules.pop(record.job, None)
        self._schedules[record.job] = (self._cursor, record)

    def schedule_changes(self, since: int) -> ScheduleChanges:
        newest_first = []
        for cursor, record in reversed(self._schedules.values()):
            if cursor <= since:
                break
            newest_first.append(record)
        return ScheduleChanges(max(since, self._cursor), tuple(reversed(newest_first)))

    def instances(self, since_ms: int) -> List[Tuple[str, str, int, int]]:
        rows = [(runner, *kept) for runner, kept in self._instances.items() if kept[2] >= since_ms]
        return sorted(rows, key=lambda row: (row[2], row[0]))

    def save_instance(self, runner: str, body: str, now_ms: int) -> None:
        kept = self._instances.get(runner)
        self._instances[runner] = (body, kept[1] if kept is not None else now_ms, now_ms)

    def drop_instances(self, before_ms: int) -> None:
        for runner in [runner for runner, kept in self._instances.items() if kept[2] < before_ms]:
            del self._instances[runner]

    def drop_instance(self, runner: str) -> None:
        self._instances.pop(runner, None)


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
