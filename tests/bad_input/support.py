"""Tampering with stored runs behind a store's back, through the store's own raw client:
SQLite and PostgreSQL ``UPDATE``, Redis/Valkey ``HSET`` of a run's JSON."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable, Dict

from leasecron import Store
from tests.conftest import Backend

#: The backends whose stored records a test can change behind the store's back (the memory
#: store's records are objects of this process: there is no raw client to tamper with).
TAMPERABLE = ["sqlite", "redis", "valkey", "redis-cluster", "postgresql"]

__all__ = ["TAMPERABLE", "CASES", "tamper"]


def _sql(backend: Backend, assignment: str, job: str, slot_ms: int) -> None:
    """``UPDATE <runs> SET <assignment>`` for one run, through the database's own driver."""
    where = "job = %(job)s AND slot_ms = %(slot)s"
    if backend.kind == "sqlite":
        conn = sqlite3.connect(str(backend.tmp_path / "leasecron.db"), timeout=10, isolation_level=None)
        try:
            conn.execute(
                f"UPDATE {backend.namespace} SET {assignment} WHERE job = :job AND slot_ms = :slot",
                {"job": job, "slot": slot_ms},
            )
        finally:
            conn.close()
        return
    import psycopg2

    conn = psycopg2.connect(backend.dsn())  # type: ignore[attr-defined]
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            table = f"{backend.namespace}.leasecron_runs"
            cur.execute(f"UPDATE {table} SET {assignment} WHERE {where}", {"job": job, "slot": slot_ms})
            assert cur.rowcount == 1
    finally:
        conn.close()


def _json(change: Callable[[Dict[str, Any]], Any]) -> Callable[[Backend, Store, str, int], None]:
    """A tampering of a Redis run's JSON: ``change(fields)`` returns the new value (bytes, or an
    object dumped as JSON), written with HSET through the store's own client."""

    def apply(backend: Backend, store: Store, job: str, slot_ms: int) -> None:
        from leasecron.stores.redis import job_keys

        key = job_keys(backend.namespace, job)[0]
        client: Any = store.client  # type: ignore[attr-defined]
        raw = client.hget(key, str(slot_ms))
        assert raw is not None, (job, slot_ms)
        value = change(json.loads(raw))
        client.hset(key, str(slot_ms), value if isinstance(value, bytes) else json.dumps(value))

    return apply


def _update(assignment: str) -> Callable[[Backend, Store, str, int], None]:
    def apply(backend: Backend, store: Store, job: str, slot_ms: int) -> None:
        _sql(backend, assignment, job, slot_ms)

    return apply


_REDIS_CASES = {
    "not JSON": _json(lambda run: b"{garbage"),
    "a JSON array": _json(lambda run: b"[1, 2]"),
    "lease_end_ms missing": _json(lambda run: {k: v for k, v in run.items() if k != "lease_end_ms"}),
    "attempt not a number": _json(lambda run: {**run, "attempt": "many"}),
    "status unknown": _json(lambda run: {**run, "status": "bogus"}),
}

#: How a run can be tampered with, per kind of store: name -> apply(backend, store, job, slot_ms).
#: The first case of each makes every read of the job's running runs fail.
CASES: Dict[str, Dict[str, Callable[[Backend, Store, str, int], None]]] = {
    "sqlite": {
        "text in an integer column": _update("attempt = 'many'"),
        "lease end not a number": _update("lease_end_ms = 'soon'"),
        "status unknown": _update("status = 'bogus'"),
        "bytes as error text": _update("error = x'00ff'"),
        "released not a flag": _update("released = 7"),
    },
    "postgresql": {
        "attempt 0": _update("attempt = 0"),
        "handovers negative": _update("handovers = -1"),
        "status unknown": _update("status = 'bogus'"),
    },
    "redis": _REDIS_CASES,
    "valkey": _REDIS_CASES,
    "redis-cluster": _REDIS_CASES,
}


def tamper(backend: Backend, store: Store, job: str, slot_ms: int, case: str) -> None:
    """Tamper with the stored run of ``job`` at ``slot_ms`` as ``case`` says, behind the store's back."""
    CASES[backend.name][case](backend, store, job, slot_ms)
