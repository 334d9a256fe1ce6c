"""What each store operation costs the store, counted at the client: :class:`CallCounter`.

It wraps the store's own way out (the Redis client's ``execute_command``, the PostgreSQL
store's cursor, the SQLite store's ``begin_immediate``), so a count is what reached the store,
whatever the operation did on the way.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from leasecron.stores import SQLiteStore, Store
from leasecron.stores import sqlite as sqlite_store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore

from .timing import Timing


class CallCounter:
    """Counts what each operation costs the store: round trips to Redis/Valkey (commands sent
    by the store's client, counted at its ``execute_command``), PostgreSQL statements sent
    (counted at the store's cursor), SQLite transactions begun (counted at the store's
    ``begin_immediate``). ``None`` for the memory store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._count = 0
        self._lock = threading.Lock()
        self.unit = ""
        if isinstance(store, PostgresStore):
            original = store._cursor

            @contextmanager
            def counting(doing: str) -> Iterator[Any]:
                with original(doing) as cur:
                    yield _CountingCursor(cur, self._add)

            store._cursor = counting  # type: ignore[method-assign]
            self.unit = "statements"
        elif isinstance(store, SQLiteStore):
            # The store's write sections call sqlite.begin_immediate: counted there, a transaction
            # costs the store nothing more (a trace callback on its connections cost each statement
            # of every operation some 2 us: SQLite builds the statement's text for it).
            begin = sqlite_store.begin_immediate

            def begin_counted(*args: Any, **options: Any) -> Any:
                self._add()
                return begin(*args, **options)

            sqlite_store.begin_immediate = begin_counted
            self.unit = "transactions"
        elif isinstance(store, RedisStore):
            client = store.client
            send = client.execute_command

            def execute_command(*args: Any, **options: Any) -> Any:
                self._add()
                return send(*args, **options)

            client.execute_command = execute_command
            make_pipeline = client.pipeline

            def pipeline(*args: Any, **options: Any) -> Any:  # a pipeline's execute is one round trip
                pipe = make_pipeline(*args, **options)
                execute = pipe.execute

                def counted(*execute_args: Any, **execute_options: Any) -> Any:
                    self._add()
                    return execute(*execute_args, **execute_options)

                pipe.execute = counted
                return pipe

            client.pipeline = pipeline
            self.unit = "round trips"

    def _add(self) -> None:
        with self._lock:
            self._count += 1

    def total(self) -> Optional[int]:
        """Calls so far (None where nothing is counted)."""
        if not self.unit:
            return None
        with self._lock:
            return self._count

    def per_op(self, fn: Callable[[], Timing], n: int) -> Timing:
        """Run ``fn`` (a batch of ``n`` operations) and note its calls per operation."""
        before = self.total()
        timing = fn()
        after = self.total()
        if before is not None and after is not None:
            timing.calls = (after - before) / n
        return timing


class _CountingCursor:
    def __init__(self, cursor: Any, add: Callable[[], None]) -> None:
        self._cursor = cursor
        self._add = add

    def execute(self, sql: str, params: Any = None) -> None:
        self._add()
        self._cursor.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)
