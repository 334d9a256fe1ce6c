"""The SQLite store's :class:`~leasecron.stores.rules.Table`: the reads and writes of the lease
rules, as the named queries of ``stores/sql/sqlite/queries.sql``, on the connection of one
transaction."""

from __future__ import annotations

import sqlite3
from typing import Any, Dict, List, Optional

from .records import Record, read_record
from .rules import Table

__all__ = ["SQLiteTable"]


def _record(row: sqlite3.Row) -> Record:
    data = dict(row)
    return read_record(data["job"], data["slot_ms"], data)  # StoreError if it was tampered with


class SQLiteTable(Table):
    """The reads and writes of one transaction on ``conn``, by the named ``queries``."""

    def __init__(self, conn: sqlite3.Connection, queries: Dict[str, str]) -> None:
        self._conn = conn
        self._q = queries

    def _all(self, name: str, **params: Any) -> List[Record]:
        return [_record(row) for row in self._conn.execute(self._q[name], params)]

    def _one(self, name: str, **params: Any) -> Optional[Record]:
        row = self._conn.execute(self._q[name], params).fetchone()
        return None if row is None else _record(row)

    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        return self._one("get", job=job, slot_ms=slot_ms)

    def newest(self, job: str) -> Optional[Record]:
        return self._one("newest", job=job)

    def running(self, job: str) -> List[Record]:
        return self._all("running", job=job)

    def live_before(self, job: str, before_ms: int, now_ms: int) -> Optional[Record]:
        return self._one("live_before", job=job, before_ms=before_ms, now_ms=now_ms)

    def interrupt_expired(self, job: str, before_ms: int, now_ms: int, why: str) -> None:
        params = {"job": job, "before_ms": before_ms, "now_ms": now_ms, "why": why}
        self._conn.execute(self._q["interrupt_expired"], params)

    def latest(self, job: str, limit: int) -> List[Record]:
        return self._all("latest", job=job, limit=limit)

    def jobs(self) -> List[str]:
        return [row[0] for row in self._conn.execute(self._q["jobs"])]

    def insert(self, record: Record) -> None:
        self._conn.execute(self._q["insert"], vars(record))

    def update(self, record: Record) -> None:
        self._conn.execute(self._q["update"], vars(record))

    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        self._conn.execute(self._q["prune"], {"job": job, "keep": keep, "horizon_ms": horizon_ms})
