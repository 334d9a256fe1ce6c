"""The four systems of ``peers.py``, each a scheduler on a store, and the namespaces they run in.

leasecron and APScheduler share one temporary SQLite file (leasecron's
tables and APScheduler's ``aps_bench_<random>``), and one PostgreSQL schema
of the benchmark's own (``store_ops.postgres_bench_store``; APScheduler's
table in it). Every namespace is made here before the processes start
(APScheduler's table too, so that three processes do not race to create it)
and removed on the way out, whatever happened. A PostgreSQL that does not
answer leaves its two systems out, with the reason.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

from fire_lag import postgres_namespace, sqlite_namespace
from store_ops import url_options

from leasecron import Store

from . import APSCHEDULER, LEASECRON, LEASECRON_JOB, say

#: The directory of peers.py and fire_lag.py (whose ``--instance`` modes are the systems' processes).
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: How long PostgreSQL may take to answer the first connection.
PG_CONNECT_TIMEOUT_S = 5
#: What each system's processes do, as printed.
WORKLOADS = {
    LEASECRON: 'LeaseCron(store, runner="i<n>", jitter_ms=0).add_job(handler, 1, name="job0"): 1 s, epoch-aligned',
    APSCHEDULER: 'BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url, tablename)}, timezone=UTC)'
    '.add_job(tick, "cron", second="*", id="tick", replace_existing=True)',
}


@dataclass
class System:
    """One scheduler on one store: how to start its processes, and (leasecron) its store to read back."""

    scheduler: str  # LEASECRON or APSCHEDULER
    store_name: str  # "SQLite" or "PostgreSQL"
    url: str  # leasecron: the store URL; APScheduler: the SQLAlchemy URL
    store: Optional[Store] = None  # leasecron: the parent's handle on the same store
    table: str = ""  # APScheduler: its jobs table
    schema: str = ""  # APScheduler on PostgreSQL: the table's schema

    @property
    def label(self) -> str:
        """``<scheduler>, <store>``."""
        return f"{self.scheduler}, {self.store_name}"

    def argv(self, index: int, slots: int, out: str) -> List[str]:
        """The command line of its process ``index``."""
        if self.scheduler == LEASECRON:
            return [
                sys.executable, os.path.join(BENCHMARKS, "fire_lag.py"), "--instance", "--store", self.url,
                "--phase", "steady", "--jobs", "1", "--slots", str(slots), "--index", str(index), "--out", out,
                "--history", str(max(100, slots + 60)),
            ]  # fmt: skip
        return [
            sys.executable, os.path.join(BENCHMARKS, "peers.py"), "--instance", "--aps-url", self.url,
            "--table", self.table, "--schema", self.schema, "--slots", str(slots), "--index", str(index), "--out", out,
        ]  # fmt: skip


def peer_versions() -> Dict[str, str]:
    """APScheduler's and SQLAlchemy's versions; SystemExit naming the extra when either is missing."""
    try:
        import apscheduler
        import sqlalchemy
    except ImportError as exc:
        missing = f"peers.py needs APScheduler 3 and SQLAlchemy ({exc}): pip install 'leasecron[peers]'"
        raise SystemExit(missing) from None
    if not apscheduler.__version__.startswith("3."):
        raise SystemExit(f"peers.py measures APScheduler 3, found {apscheduler.__version__}")
    return {"APScheduler": apscheduler.__version__, "SQLAlchemy": sqlalchemy.__version__}


@contextmanager
def aps_table(url: str, schema: str = "") -> Iterator[str]:
    """A new jobs table ``aps_bench_<random>`` for APScheduler at ``url``, dropped on the way out.

    Made here, before the processes start, so that three of them do not race to create it.
    """
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

    name = f"aps_bench_{secrets.token_hex(4)}"
    jobstore = SQLAlchemyJobStore(url=url, tablename=name, tableschema=schema or None)
    try:
        jobstore.jobs_t.create(jobstore.engine)  # fails if it exists: never dropped then
        try:
            yield name
        finally:
            jobstore.jobs_t.drop(jobstore.engine, checkfirst=True)
    finally:
        jobstore.engine.dispose()


def pg_unreachable(url: str) -> Optional[str]:
    """Why PostgreSQL at ``url`` cannot be used (None if it answers)."""
    try:
        import psycopg2
    except ImportError:
        return "psycopg2 is not installed (pip install 'leasecron[peers]')"
    dsn = urlunsplit(urlsplit(url)._replace(query="", fragment=""))
    try:
        psycopg2.connect(dsn, connect_timeout=PG_CONNECT_TIMEOUT_S).close()
    except psycopg2.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def sqlalchemy_pg_url(url: str, application_name: str) -> str:
    """The SQLAlchemy URL (psycopg2 driver) of a leasecron PostgreSQL URL's server and database."""
    parts = urlsplit(url)
    return urlunsplit(("postgresql+psycopg2", parts.netloc, parts.path, f"application_name={application_name}", ""))


def open_systems(stack: ExitStack, tmp: str, pg: str) -> Tuple[List[System], Dict[str, Any]]:
    """Each system's namespace, made here and entered on ``stack`` (which removes them); with what
    was made, the versions of the stores, and why PostgreSQL was left out (if it was)."""
    made: Dict[str, Any] = {"tmp": tmp, "aps_tables": []}
    path = os.path.join(tmp, "peers.db")
    lite_url, lite_store, _ = stack.enter_context(sqlite_namespace("sqlite:///" + path))
    lite_store.now_ms()
    aps_url = "sqlite:///" + path  # SQLAlchemy's URL of the same file: four slashes for an absolute path
    lite_table = stack.enter_context(aps_table(aps_url))
    made["aps_tables"].append(lite_table)
    made["SQLite"] = sqlite3.sqlite_version
    systems = [
        System(LEASECRON, "SQLite", lite_url, store=lite_store),
        System(APSCHEDULER, "SQLite", aps_url, table=lite_table),
    ]
    why = "--pg ''" if not pg else pg_unreachable(pg)
    if why is not None:
        made["pg_skipped"] = why
        return systems, made
    say(f"PostgreSQL: a schema of the benchmark's own at {urlsplit(pg).netloc}")
    pg_url, pg_store, _ = stack.enter_context(postgres_namespace(pg, [LEASECRON_JOB], name="peers"))
    owned = "schema" not in url_options(pg)
    aps_pg = sqlalchemy_pg_url(pg, f"leasecron-peers-aps-{os.getpid()}")
    pg_table = stack.enter_context(aps_table(aps_pg, pg_store.schema))
    made["aps_tables"].append(f"{pg_store.schema}.{pg_table}")
    made.update(pg_schema=pg_store.schema, pg_schema_owned=owned, PostgreSQL=pg_store.server_version())
    systems += [
        System(LEASECRON, "PostgreSQL", pg_url, store=pg_store),
        System(APSCHEDULER, "PostgreSQL", aps_pg, table=pg_table, schema=pg_store.schema),
    ]
    return systems, made
