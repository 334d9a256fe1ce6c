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
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..controls import JobState, ManualRequest
from ..errors import StoreError
from ..stored import FINISHED_STATUSES, ScheduleChanges, StoredSchedule
from ..runs import Run
from .control_records import read_pause, read_request
from .records import Record, read_record, stored_attempts_json
from .sqlite_file import is_busy, retry_while_busy
from .table import NewSlot, Table

__all__ = ["SQLiteTable"]

#: How a stored schedule's kwargs and options are kept: compact JSON text, keys sorted.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


#: The columns of ``<table>``, in their order (``SELECT *``; a schema of version 1 has the first 13:
#: its runs read as one attempt each, none manual).
_RUN_COLUMNS = (
    "job", "slot_ms", "attempt", "token", "runner", "status", "lease_end_ms", "released", "handovers", "reason",
    "error", "started_ms", "finished_ms", "attempts", "manual",
)  # fmt: skip


def _record(row: Sequence[Any]) -> Record:
    data = dict(zip(_RUN_COLUMNS, row))  # by position: a third of dict(row)'s cost, and every claim reads a run
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

    def __init__(
        self, conn: sqlite3.Connection, queries: Dict[str, str], busy_timeout_s: Optional[float] = None
    ) -> None:
        self._conn = conn
        self._q = queries
        #: Outside a write transaction (a read section), how long a statement that finds the file
        #: busy is tried again: the connection's busy timeout is 0, and the table waits itself.
        self._busy_timeout_s = busy_timeout_s

    def _rows(self, name: str, **params: Any) -> sqlite3.Cursor:
        try:
            return self._conn.execute(self._q[name], params)
        except sqlite3.OperationalError as exc:
            if self._busy_timeout_s is None or not is_busy(exc):
                raise
        deadline = time.monotonic() + self._busy_timeout_s
        return retry_while_busy(lambda: self._conn.execute(self._q[name], params), deadline)

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

    def summaries(self, jobs: List[str]) -> Dict[str, Tuple[Record, Dict[str, int]]]:
        """One statement (``summaries`` in ``queries.sql``)."""
        found = {}
        for row in self._rows("summaries", jobs=json.dumps(jobs)):
            record = _record(row[len(FINISHED_STATUSES) :])
            ends = dict(zip(FINISHED_STATUSES, row))
            if any(type(ms) is not int for ms in ends.values() if ms is not None):
                raise StoreError(f"a stored run of job {record.job!r} is unreadable: its finished_ms is no integer")
            found[record.job] = (record, {status: ms for status, ms in ends.items() if ms is not None})
        return found

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction (a deferred ``BEGIN``): its reads see the file at one moment (WAL)
        and take no lock a writer waits for; it ends with a ``ROLLBACK``, having written nothing."""
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("ROLLBACK")

    def jobs(self) -> List[str]:
        return [row[0] for row in self._rows("jobs")]

    def insert(self, record: Record) -> None:
        self._rows("insert", **_row(record))

    plain_steps = True

    def insert_plain(self, run: Run, version: int, keep: int, horizon_ms: int) -> bool:
        """One statement (``insert_plain`` in ``queries.sql``), and the pruning only when it has
        runs to delete. The run's one attempt is its own fields: ``attempts`` is NULL."""
        params = (
            run.job, run.slot_ms, run.token, run.runner, run.lease_end_ms, run.reason, run.started_ms,
            version, keep, horizon_ms,
        )  # fmt: skip
        row = self._conn.execute(self._q["insert_plain"], params).fetchone()
        if row is None:
            return False
        if row[0]:
            self.prune(run.job, keep, horizon_ms)
        return True

    def finish_plain(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str], now_ms: int) -> bool:
        """One statement (``finish_plain`` in ``queries.sql``)."""
        params = (job, slot_ms, token, status, error, now_ms)
        return self._conn.execute(self._q["finish_plain"], params).rowcount == 1

    def renew_current(self, job: str, slot_ms: int, token: str, lease_end_ms: int) -> bool:
        """One statement (``renew_current`` in ``queries.sql``)."""
        return self._conn.execute(self._q["renew_current"], (job, slot_ms, token, lease_end_ms)).rowcount == 1

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
