"""The SQLite store's :class:`~leasecron.stores.table.Table`: the reads and writes of the lease
rules, as the named queries of ``stores/sql/sqlite/queries.sql``, on the connection of one
transaction. A run's attempts are kept as JSON text (:func:`~leasecron.stores.records.attempts_json`),
or NULL when they are the one attempt the run's own fields describe (most runs: nothing to parse)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Dict, List, Optional

from ..controls import JobState, ManualRequest
from .records import Record, read_pause, read_record, read_request, stored_attempts_json
from .table import NewSlot, Table

__all__ = ["SQLiteTable"]


def _record(row: sqlite3.Row) -> Record:
    data = dict(row)
    return read_record(data["job"], data["slot_ms"], data)  # StoreError if it was tampered with


def _row(record: Record) -> Dict[str, Any]:
    return {**vars(record), "attempts": stored_attempts_json(record)}


def _request(row: sqlite3.Row) -> ManualRequest:
    return read_request(row["job"], dict(row))  # StoreError if it was tampered with


class SQLiteTable(Table):
    """The reads and writes of one transaction on ``conn``, by the named ``queries``."""

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
        paused, newest, requested = self._rows("new_slot", job=job, slot_ms=slot_ms).fetchone()
        return NewSlot(bool(paused), newest, bool(requested))

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

    def renew(self, job: str, slot_ms: int, lease_end_ms: int) -> None:
        self._rows("renew", job=job, slot_ms=slot_ms, lease_end_ms=lease_end_ms)

    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        self._rows("prune", job=job, keep=keep, horizon_ms=horizon_ms)

    def pause(self, job: str) -> Optional[JobState]:
        row = self._rows("get_pause", job=job).fetchone()
        return None if row is None else read_pause(job, dict(row))

    def pauses(self) -> List[JobState]:
        return [read_pause(row["job"], dict(row)) for row in self._rows("pauses")]

    def set_pause(self, state: JobState) -> None:
        self._rows("set_pause", job=state.job, paused_by=state.paused_by, paused_ms=state.paused_ms, note=state.note)

    def clear_pause(self, job: str) -> None:
        self._rows("clear_pause", job=job)

    def request(self, job: str, slot_ms: int) -> Optional[ManualRequest]:
        row = self._rows("get_request", job=job, slot_ms=slot_ms).fetchone()
        return None if row is None else _request(row)

    def requests(self, job: Optional[str]) -> List[ManualRequest]:
        return self._requests("all_requests") if job is None else self._requests("job_requests", job=job)

    def pending(self, now_ms: int) -> List[ManualRequest]:
        return self._requests("pending", now_ms=now_ms)

    def add_request(self, request: ManualRequest) -> None:
        self._rows("add_request", **vars(request))

    def end_request(self, job: str, slot_ms: int, state: str) -> None:
        self._rows("end_request", job=job, slot_ms=slot_ms, state=state)

    def prune_requests(self, job: str, keep: int, now_ms: int) -> None:
        self._rows("prune_requests", job=job, keep=keep, now_ms=now_ms)
