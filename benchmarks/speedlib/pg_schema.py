"""PostgreSQL: a schema of the benchmark's own, made for a run and dropped after it.

:func:`postgres_bench_store` never drops or reuses what it did not make: an existing schema of
its name is an error, and with a ``schema=`` given only the rows of the run's jobs are deleted.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator, List, Sequence, Tuple

from leasecron.stores.postgres import PostgresStore

from .urls import url_options, with_option


def pg_execute(store: PostgresStore, sql: str, params: Any = None) -> List[Tuple[Any, ...]]:
    """Run one statement on a connection of its own to the store's database (autocommit, blocking;
    not the store's pool, whose first use would create the store's schema); its rows, if any."""
    import psycopg2

    conn = psycopg2.connect(store._pool._dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description is not None else []
    finally:
        conn.close()


def delete_jobs(store: PostgresStore, jobs: List[str]) -> None:
    """Delete the runs and the job rows of ``jobs``."""
    table = f"{store.schema}.{store.table}"
    pg_execute(store, f"DELETE FROM {table} WHERE job = ANY(%s)", (jobs,))
    pg_execute(store, f"DELETE FROM {table}_jobs WHERE job = ANY(%s)", (jobs,))


@contextmanager
def postgres_bench_store(
    url: str, name: str = "bench", jobs: Sequence[str] = ()
) -> Iterator[Tuple[PostgresStore, bool]]:
    """A PostgresStore for ``url`` and whether its schema is the benchmark's own.

    Without ``schema=`` in ``url``: a fresh schema ``leasecron_<name>_<pid>``,
    created here (an existing one of that name is an error, never reused).
    With ``schema=``: that schema, created here if it does not exist; if it
    exists and any of ``jobs`` has runs there, an error (never touched), and
    the rows of ``jobs`` are deleted on the way out. A schema created here is
    dropped on the way out, whatever happened.
    """
    options = url_options(url)
    given = options.get("schema")
    if given is None:
        url = with_option(url, "schema", f"leasecron_{name}_{os.getpid()}")
    if "application_name" not in options:  # so that pg_stat_activity says whose sessions these are
        url = with_option(url, "application_name", f"leasecron-{name}-{os.getpid()}")
    store = PostgresStore.from_url(url)
    owned = False
    try:
        exists = pg_execute(store, "SELECT to_regnamespace(%s) IS NOT NULL", (store.schema,))[0][0]
        if exists and given is None:
            raise SystemExit(
                f"schema {store.schema} exists (left by a killed run?); not touching it."
                f" Drop it (DROP SCHEMA {store.schema} CASCADE) or pass ?schema=..."
            )
        if exists and jobs and set(store.jobs()) & set(jobs):
            raise SystemExit(f"jobs of this benchmark already have runs in schema {store.schema}; not touching them")
        if not exists:
            pg_execute(store, f"CREATE SCHEMA {store.schema}")
            owned = True
        yield store, owned
    finally:
        try:
            if owned:
                drop_schema(store)
            elif jobs and store._schema.ready:
                delete_jobs(store, list(jobs))
        finally:
            store.close()


def drop_schema(store: PostgresStore) -> None:
    """DROP SCHEMA ... CASCADE, on a second connection if the first one fails."""
    for attempt in (1, 2):
        try:
            pg_execute(store, f"DROP SCHEMA IF EXISTS {store.schema} CASCADE")
            return
        except Exception as exc:  # noqa: BLE001 - say what is left behind, then give up
            if attempt == 2:
                print(
                    f"could not drop schema {store.schema} ({exc}); drop it by hand:"
                    f" DROP SCHEMA {store.schema} CASCADE",
                    file=sys.stderr,
                )
