"""The jobs' side effect in a chaos run: one SQLite table shared by every instance.

A handler writes its result here once it returned; the table keeps only the
newest attempt of each slot, so the checker can verify that fencing kept an
older attempt's result out (``checker/sink.py``).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

__all__ = ["Sink"]


#: How long a handler's write waits for the sink's lock before it looks at its run's signal again.
WRITER_BUSY_MS = 20


class Sink:
    """The jobs' side effect: a SQLite table that keeps only the newest attempt of a slot.

    ``results(job, slot_ms, attempt, token, PRIMARY KEY(job, slot_ms))``,
    shared by every instance (WAL). A write is accepted when the slot has no
    row or its row's attempt is not newer; it then replaces the row. Decided
    in ``BEGIN IMMEDIATE``. ``busy_ms`` is how long one call waits for a
    lock another process holds: the handlers' sink waits only
    :data:`WRITER_BUSY_MS` and tries again itself, watching its run's signal
    between tries (a frozen instance can hold the write lock for seconds).
    """

    def __init__(self, path: Path, busy_ms: int = 5_000, create: bool = True) -> None:
        """Open the sink at ``path``; with ``create``, make its table (in WAL mode) first.

        The harness creates the sink before it starts an instance, so an instance opens it with
        ``create=False`` and takes no lock to start: another instance frozen while it closed its
        connection (a checkpoint's exclusive lock) once kept an instance's start from a
        ``CREATE TABLE IF NOT EXISTS`` until it failed ("database is locked").
        """
        self.path = path
        self.busy_ms = busy_ms
        if create:
            self._create()

    def _create(self) -> None:
        """Switch the file to WAL and create the table if it is not there."""
        conn = self._connect()
        try:
            for _ in range(50):  # switching to WAL needs a moment without other connections
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError:
                    time.sleep(0.1)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS results ("
                " job TEXT NOT NULL, slot_ms INTEGER NOT NULL, attempt INTEGER NOT NULL,"
                " token TEXT NOT NULL, PRIMARY KEY (job, slot_ms))"
            )
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=self.busy_ms / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_ms)}")
        return conn

    def write(self, job: str, slot_ms: int, attempt: int, token: str) -> bool:
        """Store this attempt's result unless a newer attempt's is there; whether it was accepted."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT attempt FROM results WHERE job = ? AND slot_ms = ?", (job, slot_ms)
                ).fetchone()
                accepted = row is None or row[0] <= attempt
                if accepted:
                    conn.execute(
                        "INSERT OR REPLACE INTO results (job, slot_ms, attempt, token) VALUES (?, ?, ?, ?)",
                        (job, slot_ms, attempt, token),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return accepted
        finally:
            conn.close()
