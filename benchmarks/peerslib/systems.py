"""The six systems of ``peers.py``'s table, each a scheduler on a store, and the namespaces they run in.

leasecron, APScheduler 3 and APScheduler 4 share one temporary SQLite file
(leasecron's tables, APScheduler 3's ``aps_bench_<random>``, APScheduler 4's
``metadata``, ``tasks``, ``schedules``, ``jobs``, ``job_results``) and one
PostgreSQL database: leasecron in a schema of the benchmark's own
(``speedlib.pg_schema.postgres_bench_store``) with APScheduler 3's table in it, and
APScheduler 4 in a second schema of the benchmark's own (its table names
are fixed). APScheduler 4's event broker: PostgreSQL's ``NOTIFY`` beside its
PostgreSQL store, Redis (a channel of the run's own) beside SQLite. Every
namespace is made here before the processes start (the tables too, so that
the processes do not race to create them) and removed on the way out,
whatever happened. A PostgreSQL or Redis that does not answer, or an
APScheduler 4 environment that could not be made, leaves the systems that
need it out, with the reason.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

from fire_lag import postgres_namespace, sqlite_namespace
from speedlib.urls import url_options

from leasecron import Store

from . import APSCHEDULER, APSCHEDULER4, LEASECRON, LEASECRON_JOB, say
from .venvs import Venv

#: The directory of peers.py and fire_lag.py (whose ``--instance`` modes are the systems' processes).
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The APScheduler 4 process, run by its environment's Python.
APS4_SCRIPT = os.path.join(BENCHMARKS, "peerslib", "aps4_process.py")
#: How long PostgreSQL (or Redis) may take to answer the first connection.
PG_CONNECT_TIMEOUT_S = 5
#: What each system's processes do, as printed.
WORKLOADS = {
    LEASECRON: 'LeaseCron(store, runner="i<n>", jitter_ms=0).add_job(handler, 1, name="job0"): 1 s, epoch-aligned',
    APSCHEDULER: 'BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url, tablename)}, timezone=UTC)'
    '.add_job(tick, "cron", second="*", id="tick", replace_existing=True)',
    APSCHEDULER4: 'Scheduler(SQLAlchemyDataStore(url, schema), event_broker).add_schedule(tick, CronTrigger('
    'second="*", start_time=<the first slot>, timezone=UTC), id="tick"); event_broker: PsycopgEventBroker'
    ' (PostgreSQL) or RedisEventBroker (SQLite)',
}


@dataclass
class System:
    """One scheduler on one store: how to start its processes, and (leasecron) its store to read back."""

    scheduler: str  # LEASECRON, APSCHEDULER or APSCHEDULER4
    store_name: str  # "SQLite" or "PostgreSQL"
    url: str  # leasecron: the store URL; APScheduler: the SQLAlchemy URL
    store: Optional[Store] = None  # leasecron: the parent's handle on the same store
    table: str = ""  # APScheduler 3: its jobs table
    schema: str = ""  # APScheduler on PostgreSQL: the table's schema (APScheduler 4: its tables')
    python: str = ""  # APScheduler 4: its environment's Python
    broker: str = ""  # APScheduler 4: the event broker (psycopg conninfo or Redis URL) ...
    channel: str = ""  # ... and its channel

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
        if self.scheduler == APSCHEDULER4:
            return [self.python, APS4_SCRIPT, "--mode", "table", *aps4_options(self.url, self.schema, self.broker,
                    self.channel), "--slots", str(slots), "--index", str(index), "--out", out]  # fmt: skip
        return [
            sys.executable, os.path.join(BENCHMARKS, "peers.py"), "--instance", "--aps-url", self.url,
            "--table", self.table, "--schema", self.schema, "--slots", str(slots), "--index", str(index), "--out", out,
        ]  # fmt: skip


def peer_versions() -> Dict[str, str]:
    """APScheduler 3's and SQLAlchemy's versions; SystemExit naming the extra when either is missing."""
    try:
        import apscheduler
        import sqlalchemy
    except ImportError as exc:
        missing = f"peers.py needs APScheduler 3 and SQLAlchemy ({exc}): pip install 'leasecron[bench-peers]'"
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
        return "psycopg2 is not installed (pip install 'leasecron[bench-peers]')"
    dsn = urlunsplit(urlsplit(url)._replace(query="", fragment=""))
    try:
        psycopg2.connect(dsn, connect_timeout=PG_CONNECT_TIMEOUT_S).close()
    except psycopg2.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def redis_unreachable(url: str) -> Optional[str]:
    """Why Redis at ``url`` cannot be used (None if it answers)."""
    try:
        import redis
    except ImportError:
        return "redis-py is not installed (pip install 'leasecron[bench-peers]')"
    client = redis.Redis.from_url(url, socket_connect_timeout=PG_CONNECT_TIMEOUT_S)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def sqlalchemy_pg_url(url: str, application_name: str, driver: str = "psycopg2") -> str:
    """The SQLAlchemy URL (``driver``) of a leasecron PostgreSQL URL's server and database."""
    parts = urlsplit(url)
    return urlunsplit((f"postgresql+{driver}", parts.netloc, parts.path, f"application_name={application_name}", ""))


def libpq_url(url: str) -> str:
    """A leasecron PostgreSQL URL's server and database, as a libpq URI (no leasecron options)."""
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))


def aps4_options(url: str, schema: str, broker: str, channel: str) -> List[str]:
    """``aps4_process.py``'s options naming its data store and event broker."""
    return ["--url", url, "--schema", schema, "--broker", broker, "--channel", channel]


class Aps4Tables:
    """APScheduler 4's tables, made by ``aps4_process.py --mode init`` before its processes start (so that
    they do not race to create them), several stores at once."""

    def __init__(self, stack: ExitStack) -> None:
        self.procs: List["subprocess.Popen[str]"] = []
        stack.callback(self.reap)  # before the namespaces entered earlier are removed

    def start(self, venv: Venv, options: List[str]) -> None:
        """Start making them in the store that ``options`` name."""
        argv = [venv.python, APS4_SCRIPT, "--mode", "init", *options]
        self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))

    def wait(self) -> None:
        """Wait until every store has them; RuntimeError saying why one has not."""
        procs, self.procs = self.procs, []
        errors = []
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                errors.append(err.strip()[-800:])
        if errors:
            raise RuntimeError("APScheduler 4 could not create its tables: " + "\n".join(errors))

    def reap(self) -> None:
        """On the way out: stop any still making them."""
        for proc in self.procs:
            proc.kill()
            proc.communicate()


@contextmanager
def own_pg_schema(url: str, name: str) -> Iterator[str]:
    """A new schema ``name`` in the database of ``url`` (an existing one is an error, never touched),
    dropped with everything in it on the way out."""
    import psycopg2

    conn = psycopg2.connect(libpq_url(url), connect_timeout=PG_CONNECT_TIMEOUT_S)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regnamespace(%s) IS NOT NULL", (name,))
            if cur.fetchone()[0]:
                raise SystemExit(f"schema {name} exists (left by a killed run?); not touching it."
                                 f" Drop it (DROP SCHEMA {name} CASCADE)")  # fmt: skip
            cur.execute(f"CREATE SCHEMA {name}")
        try:
            yield name
        finally:
            with conn.cursor() as cur:
                cur.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    finally:
        conn.close()


def open_systems(
    stack: ExitStack, tmp: str, pg: str, redis_url: str, aps4: Optional[Venv]
) -> Tuple[List[System], Dict[str, Any]]:
    """Each system's namespace, made here and entered on ``stack`` (which removes them); with what
    was made, the versions of the stores, and why systems were left out (``left_out``: reasons)."""
    made: Dict[str, Any] = {"tmp": tmp, "aps_tables": [], "aps4_schemas": [], "left_out": {}}
    path = os.path.join(tmp, "peers.db")
    lite_url, lite_store, _ = stack.enter_context(sqlite_namespace("sqlite:///" + path))
    lite_store.now_ms()
    aps_url = "sqlite:///" + path  # SQLAlchemy's URL of the same file: four slashes for an absolute path
    lite_table = stack.enter_context(aps_table(aps_url))
    made["aps_tables"].append(lite_table)
    made["SQLite"] = sqlite3.sqlite_version
    channel = f"leasecron_peers_{os.getpid()}"
    tables = Aps4Tables(stack)
    systems = [
        System(LEASECRON, "SQLite", lite_url, store=lite_store),
        System(APSCHEDULER, "SQLite", aps_url, table=lite_table),
    ]
    if aps4 is not None and not redis_url:
        made["left_out"]["APScheduler 4, SQLite"] = "its event broker (RedisEventBroker) needs --redis"
    elif aps4 is not None:
        tables.start(aps4, aps4_options(aps_url, "", redis_url, channel))
        systems.append(System(APSCHEDULER4, "SQLite", aps_url, python=aps4.python, broker=redis_url, channel=channel))
    why = "--pg ''" if not pg else pg_unreachable(pg)
    if why is not None:
        made["pg_skipped"] = why
        tables.wait()
        return systems, made
    say(f"PostgreSQL: schemas of the benchmark's own at {urlsplit(pg).netloc}")
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
    if aps4 is not None:
        schema = stack.enter_context(own_pg_schema(pg, f"leasecron_peers_{os.getpid()}_aps4"))
        made["aps4_schemas"].append(schema)
        aps4_url = sqlalchemy_pg_url(pg, f"leasecron-peers-aps4-{os.getpid()}", driver="psycopg")
        tables.start(aps4, aps4_options(aps4_url, schema, libpq_url(pg), channel))
        systems.append(System(APSCHEDULER4, "PostgreSQL", aps4_url, schema=schema, python=aps4.python,
                              broker=libpq_url(pg), channel=channel))  # fmt: skip
    tables.wait()
    return systems, made
