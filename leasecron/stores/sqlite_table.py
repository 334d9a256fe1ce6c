"""The reads and writes of the lease rules in one SQLite transaction: :class:`SQLiteTable`.

:class:`~leasecron.stores.sqlite.SQLiteStore` opens the transaction and the rules
(:mod:`leasecron.stores.rules`) decide; this module turns each read and write of a
:class:`~leasecron.stores.table.Table` into a named query of ``stores/sql/sqlite/queries.sql``,
and each row back into the model's values (a tampered row is a :class:`~leasecron.StoreError`
naming what it holds).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..controls import JobState, ManualRequest
from ..errors import StoreError
from ..stored import ScheduleChanges, StoredSchedule
from .records import Record, read_pause, read_record, read_request, stored_attempts_json
from .table import NewSlot, Table

__all__ = ["SQLiteTable"]

#: How a stored schedule's kwargs and options are kept: compact JSON text, keys sorted.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _record(row: sqlite3.Row) -> Record:
    data = dict(row)
    return read_record(data["job"], data["slot_ms"], data)  # StoreError if it was tampered with


def _row(record: Record) -> Dict[str, Any]:
    return {**vars(record), "attempts": stored_attempts_json(record)}


def _request(row: sqlite3.Row) -> ManualRequest:
    return read_request(row["job"], dict(row))  # StoreError if it was tampered with


def _schedule(row: sqlite3.Row) -> StoredSchedule:
    """The stored schedule a row holds; StoreError naming the job if it was tampered with."""
    job = row["job"]
    try:
        kwargs, options = json.loads(row["kwargs"]), json.loads(row["options"])
        if not isinstance(kwargs, dict) or not isinstance(options, dict):
            raise ValueError(f"kwargs and options must be JSON objects, not {row['kwargs']!r} and {row['options']!r}")
        if type(row["version"]) is not int or type(row["cursor"]) is not int:
            raise ValueError(f"version and cursor must be integers, not {row['version']!r} and {row['cursor']!r}")
    except (TypeError, ValueError) as exc:  # json's errors are ValueErrors
        raise StoreError(f"the stored schedule of job {job!r} is unreadable: {exc}") from exc
    return StoredSchedule(
        job, row["version"], row["source"], row["schedule"], row["tz"], row["task"], kwargs, options,
        row["updated_by"], row["updated_ms"],
    )  # fmt: skip


def _statement(name: str, *params: str) -> Callable[..., None]:
    """A write of :class:`~leasecron.stores.table.Table` that is the named query ``name``: its
    arguments, given by position, are the query's parameters ``params``."""

    def write(table: SQLiteTable, *args: Any) -> None:
        table._rows(name, **dict(zip(params, args)))

    write.__name__ = write.__qualname__ = name
    return write


class SQLiteTable(Table):
    """The reads and writes of the rules in one transaction on ``conn``, by the named ``queries``.

    A run's attempts are kept as JSON text (:func:`~leasecron.stores.records.attempts_json`), or
    NULL when they are the one attempt the run's own fields describe (most runs: nothing to parse).
    """

    def __init__(self, conn: sqlite3.Connection, queries: Dict[str, str]) -> None:
        self._conn = conn
        self._q = queries

    def _rows(self, name: str, **params: Any) -> sqlite3.Cursor:
        return self._conn.execute(self._q[name], params)

    def _all(self, name: str, **params: Any) -> List[Record]:
        return [_record(row) for row in self._rows(name, **params)]

    def _one(self, name: str, **params: Any) -> Optional[Record]:
        row = self._rows(name, **params).fetchone()
        return None if row is None else _record(row)

    def _requests(self, name: str, **params: Any) -> List[ManualRequest]:
        return [_request(row) for row in self._rows(name, **params)]

    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        return self._one("get", job=job, slot_ms=slot_ms)

    def newest(self, job: str) -> Optional[Record]:
        return self._one("newest", job=job)

    def new_slot(self, job: str, slot_ms: int) -> NewSlot:
        paused, newest, requested, version = self._rows("new_slot", job=job, slot_ms=slot_ms).fetchone()
        return NewSlot(bool(paused), newest, bool(requested), version)  # rule 23: the version, in the same read

    def running(self, job: str) -> List[Record]:
        return self._all("running", job=job)

    def latest(self, job: str, limit: int) -> List[Record]:
        return self._all("latest", job=job, limit=limit)

    def recent(self, jobs: List[str], limit: int) -> Dict[str, List[Record]]:
        found: Dict[str, List[Record]] = {}
        for record in self._all("recent", jobs=json.dumps(jobs), limit=limit):
            found.setdefault(record.job, []).append(record)
        return found

    def jobs(self) -> List[str]:
        return [row[0] for row in self._rows("jobs")]

    def insert(self, record: Record) -> None:
        self._rows("insert", **_row(record))

    def update(self, record: Record) -> None:
        self._rows("update", **_row(record))

    renew = _statement("renew", "job", "slot_ms", "lease_end_ms")
    prune = _statement("prune", "job", "keep", "horizon_ms")

    def pause(self, job: str) -> Optional[JobState]:
        row = self._rows("get_pause", job=job).fetchone()
        return None if row is None else read_pause(job, dict(row))

    def pauses(self) -> List[JobState]:
        return [read_pause(row["job"], dict(row)) for row in self._rows("pauses")]

    def set_pause(self, state: JobState) -> None:
        self._rows("set_pause", job=state.job, paused_by=state.paused_by, paused_ms=state.paused_ms, note=state.note)

    clear_pause = _statement("clear_pause", "job")

    def request(self, job: str, slot_ms: int) -> Optional[ManualRequest]:
        row = self._rows("get_request", job=job, slot_ms=slot_ms).fetchone()
        return None if row is None else _request(row)

    def requests(self, job: Optional[str]) -> List[ManualRequest]:
        return self._requests("all_requests") if job is None else self._requests("job_requests", job=job)

    def pending(self, now_ms: int) -> List[ManualRequest]:
        return self._requests("pending", now_ms=now_ms)

    def add_request(self, request: ManualRequest) -> None:
        self._rows("add_request", **vars(request))

    end_request = _statement("end_request", "job", "slot_ms", "state")
    prune_requests = _statement("prune_requests", "job", "keep", "now_ms")

    def schedule(self, job: str) -> Optional[StoredSchedule]:
        row = self._rows("get_schedule", job=job).fetchone()
        return None if row is None else _schedule(row)

    def save_schedule(self, record: StoredSchedule) -> None:
        fields = record.to_dict()
        fields["kwargs"], fields["options"] = _JSON.encode(fields["kwargs"]), _JSON.encode(fields["options"])
        self._rows("save_schedule", **fields)  # rule 24: the store's next cursor

    def schedule_changes(self, since: int) -> ScheduleChanges:
        rows = self._rows("schedule_changes", since=since).fetchall()
        return ScheduleChanges(rows[-1]["cursor"] if rows else since, tuple(_schedule(row) for row in rows))

    def instances(self, since_ms: int) -> List[Tuple[str, str, int, int]]:
        return [tuple(row) for row in self._rows("instances", since_ms=since_ms)]

    save_instance = _statement("save_instance", "runner", "body", "now_ms")
    drop_instances = _statement("drop_instances", "before_ms")
    drop_instance = _statement("drop_instance", "runner")
