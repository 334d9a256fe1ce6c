"""Recovery after a SIGKILL: the systems measured, their processes and their namespaces.

Each system runs 3 processes of its own (``--instances``) on a store, all
systems at once; the measurement itself (the kills, the clocks, the table)
is :mod:`peerslib.recovery_run`.

* **leasecron** (``peers.py --recovery-instance``, below): ``LeaseCron(store,
  runner="r<n>", jitter_ms=0)`` with the library's lease defaults (``lease_ms``
  30 s, ``heartbeat_ms`` 5 s; ``--lease`` sets ``lease_ms``), and one job,
  ``add_job(handler, "* * * * * <s>", name="recover", catch_up_ms=0)``: once a
  minute at the chosen slot's second, with no catch-up of the previous
  minute's slot on start. Its handler tells the parent it started (slot,
  reason, attempt) and runs ``HOLD_S`` seconds. On Redis (beside RedBeat), on
  PostgreSQL and on SQLite (beside APScheduler 4);
* **APScheduler 4** (``aps4_process.py --mode recovery``): the same job on a
  ``CronTrigger`` once a minute at that second, ``lease_duration`` its
  default (30 s) or ``--lease``, on PostgreSQL (``PsycopgEventBroker``) and on
  SQLite (``RedisEventBroker``);
* **celery beat + RedBeat** (``redbeat_beat.py``): ``beat_schedule`` of one
  entry every second, sent to a queue of the run's own on Redis. RedBeat's
  lock timeout is 5 x ``beat_max_loop_interval`` unless set, and celery's
  default loop interval (300 s) makes it 1,500 s: too long to wait for here.
  Without ``--lease`` it is set to leasecron's default lease, 30 s, with the
  loop interval RedBeat's rule makes that from (6 s; a standby retries the
  lock once per loop interval); ``--lease S`` sets S and S / 5.

Namespaces: a SQLite file of the run's own (leasecron's tables and APScheduler
4's), a leasecron schema ``leasecron_peersrec_<pid>`` and an APScheduler 4
schema ``leasecron_peersrec_<pid>_aps4`` (both dropped at the end), the Redis
prefix ``leasecron_peers_<pid>`` (leasecron's job keys deleted at the end)
and ``leasecron_peers_<pid>_redbeat`` (RedBeat's keys, the queue and kombu's
bindings: every key with that name in it is deleted at the end).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .child import ControlPipe, stop_on_signals
from fire_lag import postgres_namespace, redis_namespace, sqlite_namespace, tell_parent
from speedlib.urls import with_option

from leasecron import Context, LeaseCron, open_store

from . import APSCHEDULER4, LEASECRON, RECOVERY_JOB, REDBEAT, say
from .systems import APS4_SCRIPT, BENCHMARKS, PG_CONNECT_TIMEOUT_S, Aps4Tables, aps4_options, libpq_url
from .systems import own_pg_schema, sqlalchemy_pg_url
from .venvs import Venv

#: The handler of a run holds this long, so that it still runs when its process is killed ...
HOLD_S = 5.0
#: RedBeat's lock timeout without ``--lease``: leasecron's default lease (RedBeat's own default is 1,500 s).
REDBEAT_LOCK_S = 30
REDBEAT_SCRIPT = os.path.join(BENCHMARKS, "peerslib", "redbeat_beat.py")


@dataclass
class Contender:
    """One system of the recovery measurement: how to start its processes and what is killed."""

    scheduler: str  # LEASECRON, APSCHEDULER4 or REDBEAT
    store_name: str  # "Redis", "PostgreSQL" or "SQLite"
    argv: Callable[[int], List[str]]  # process index -> its command line
    kind: str  # "run": the process running the job's run is killed; "beat": the beat holding the lock
    lock: str = ""  # RedBeat: its lock as configured (leasecron and APScheduler 4 say theirs when booted)
    #: APScheduler 4: what its tables hold, given the killed scheduler's identity (read when it did not recover)
    probe: Optional[Callable[[str], str]] = None

    @property
    def label(self) -> str:
        """``<scheduler>, <store>``."""
        return f"{self.scheduler}, {self.store_name}"


# ===================================================================================
# The leasecron process (peers.py --recovery-instance)
# ===================================================================================


def instance_main(args: argparse.Namespace) -> int:
    """One leasecron process: say it is up; when told the slot, add the job and start; on end of stdin
    (or SIGTERM/SIGINT) stop (a graceful stop: a run it holds is handed over)."""
    stop = stop_on_signals()
    pipe = ControlPipe(stop)
    store = open_store(args.store)
    try:
        store.now_ms()  # connect now, not at the slot
        cron = LeaseCron(store, runner=f"r{args.index}", jitter_ms=0)
        tell_parent("ready", pid=os.getpid(), identity=cron.runner)
        control = pipe.first()
        if control is None:
            return 0

        def handler(ctx: Context) -> None:
            tell_parent("start", slot_ms=ctx.slot_ms, wall_ns=time.time_ns(), reason=ctx.reason,
                        attempt=ctx.attempt, runner=ctx.runner)  # fmt: skip
            ctx.signal.wait(args.hold_s)

        second = (int(control["first_slot_ms"]) // 1000) % 60
        options: Dict[str, Any] = {"lease_ms": args.lease_ms} if args.lease_ms else {}
        job = cron.add_job(handler, f"* * * * * {second}", name=RECOVERY_JOB, catch_up_ms=0, **options)
        cron.start()
        tell_parent("booted", store_ms=cron.clock.now_ms(), lease_ms=job.options.lease_ms,
                    heartbeat_ms=job.options.heartbeat_ms)  # fmt: skip
        stop.wait()
        cron.stop()
        return 0
    finally:
        store.close()


# ===================================================================================
# The systems and their namespaces
# ===================================================================================


@contextmanager
def redis_keys_removed(url: str, name: str) -> Iterator[str]:
    """``name`` for keys of a peer on Redis (none may exist yet); every key with it is deleted on the way out."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=PG_CONNECT_TIMEOUT_S)
    pattern = f"*{name}*"
    try:
        if next(iter(client.scan_iter(match=pattern, count=1000)), None) is not None:
            raise SystemExit(f"Redis has keys matching {pattern!r} (left by a killed run?); not touching them")
        try:
            yield name
        finally:
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


def aps4_probe_pg(url: str, schema: str) -> Callable[[str], str]:
    """What APScheduler 4's tables in ``schema`` say about the task and its jobs."""

    def probe(killed: str) -> str:
        import psycopg2

        conn = psycopg2.connect(libpq_url(url), connect_timeout=PG_CONNECT_TIMEOUT_S)
        try:
            with conn.cursor() as cur:
                return aps4_state(cur, f"{schema}.", "%s", killed)
        finally:
            conn.close()

    return probe


def aps4_probe_sqlite(path: str) -> Callable[[str], str]:
    """What APScheduler 4's tables in the SQLite file say about the task and its jobs."""

    def probe(killed: str) -> str:
        conn = sqlite3.connect(path, timeout=5)
        try:
            return aps4_state(conn.cursor(), "", "?", killed)
        finally:
            conn.close()

    return probe


def aps4_state(cur: Any, prefix: str, mark: str, killed: str) -> str:
    """The task's running-jobs counter, and its jobs: held by the killed scheduler, waiting, held by others."""
    cur.execute(f"SELECT running_jobs, max_running_jobs FROM {prefix}tasks")
    tasks = cur.fetchall()
    cur.execute(f"SELECT count(*) FROM {prefix}jobs WHERE acquired_by = {mark}", (killed,))
    held = cur.fetchone()[0]
    cur.execute(f"SELECT count(*) FROM {prefix}jobs WHERE acquired_by IS NULL")
    waiting = cur.fetchone()[0]
    counters = ", ".join(f"running_jobs {running} of max_running_jobs {most}" for running, most in tasks)
    return (f"its tables then: task {counters or '(none)'}; jobs still acquired by the killed scheduler"
            f" (lease expired): {held}, waiting to be acquired: {waiting}")  # fmt: skip


def open_contenders(
    stack: ExitStack, tmp: str, pg: str, redis_url: str, venvs: Dict[str, Venv], lease_s: Optional[float]
) -> Tuple[List[Contender], Dict[str, Any]]:
    """The recovery measurement's systems, their namespaces made here and entered on ``stack``; with what
    was made and what was left out (``left_out``: reasons). ``pg`` and ``redis_url``: '' if unusable."""
    pid = os.getpid()
    made: Dict[str, Any] = {"left_out": {}, "redis_prefixes": [], "pg_schemas": []}
    lc_lease = ["--lease-ms", str(int(lease_s * 1000))] if lease_s else []
    aps4_lease = ["--lease-s", str(lease_s)] if lease_s else []

    def leasecron(url: str) -> Callable[[int], List[str]]:
        return lambda i: [sys.executable, os.path.join(BENCHMARKS, "peers.py"), "--recovery-instance", "--store", url,
                          "--index", str(i), "--hold-s", str(HOLD_S), *lc_lease]  # fmt: skip

    def aps4(options: List[str]) -> Callable[[int], List[str]]:
        python = venvs[APSCHEDULER4].python
        return lambda i: [python, APS4_SCRIPT, "--mode", "recovery", *options, "--index", str(i),
                          "--hold-s", str(HOLD_S), *aps4_lease]  # fmt: skip

    def redbeat(name: str, lock_s: int) -> Callable[[int], List[str]]:
        python = venvs[REDBEAT].python
        options = ["--redis", redis_url, "--prefix", name, "--max-interval", str(lock_s / 5),
                   "--lock-timeout", str(lock_s)]  # fmt: skip
        return lambda i: [python, REDBEAT_SCRIPT, *options, "--index", str(i)]

    contenders: List[Contender] = []
    tables = Aps4Tables(stack)
    channel = f"leasecron_peersrec_{pid}"
    if redis_url:
        prefix = f"leasecron_peers_{pid}"
        url, _, _ = stack.enter_context(redis_namespace(with_option(redis_url, "prefix", prefix), [RECOVERY_JOB]))
        made["redis_prefixes"].append(prefix)
        contenders.append(Contender(LEASECRON, "Redis", leasecron(url), "run"))
        if REDBEAT in venvs:
            name = stack.enter_context(redis_keys_removed(redis_url, f"leasecron_peers_{pid}_redbeat"))
            made["redis_prefixes"].append(name)
            lock_s = int(lease_s) if lease_s else REDBEAT_LOCK_S
            lock = f"redbeat_lock_timeout {lock_s} s, beat_max_loop_interval {lock_s / 5:g} s"
            contenders.append(Contender(REDBEAT, "Redis", redbeat(name, lock_s), "beat", lock=lock))
    else:
        made["left_out"]["recovery on Redis (leasecron, celery beat + RedBeat)"] = "no usable Redis (--redis)"
    if pg:
        url, store, _ = stack.enter_context(postgres_namespace(pg, [RECOVERY_JOB], name="peersrec"))
        made["pg_schemas"].append(store.schema)
        contenders.append(Contender(LEASECRON, "PostgreSQL", leasecron(url), "run"))
        if APSCHEDULER4 in venvs:
            schema = stack.enter_context(own_pg_schema(pg, f"leasecron_peersrec_{pid}_aps4"))
            made["pg_schemas"].append(schema)
            pg_options = aps4_options(sqlalchemy_pg_url(pg, f"leasecron-peersrec-{pid}", "psycopg"), schema,
                                      libpq_url(pg), channel)  # fmt: skip
            tables.start(venvs[APSCHEDULER4], pg_options)
            contenders.append(Contender(APSCHEDULER4, "PostgreSQL", aps4(pg_options), "run",
                                        probe=aps4_probe_pg(pg, schema)))  # fmt: skip
    path = os.path.join(tmp, "recovery.db")
    url, _, _ = stack.enter_context(sqlite_namespace("sqlite:///" + path))
    contenders.append(Contender(LEASECRON, "SQLite", leasecron(url), "run"))
    if APSCHEDULER4 in venvs and not redis_url:
        made["left_out"]["recovery of APScheduler 4, SQLite"] = "its event broker (RedisEventBroker) needs --redis"
    elif APSCHEDULER4 in venvs:
        lite_options = aps4_options("sqlite:///" + path, "", redis_url, channel)
        tables.start(venvs[APSCHEDULER4], lite_options)
        contenders.append(Contender(APSCHEDULER4, "SQLite", aps4(lite_options), "run", probe=aps4_probe_sqlite(path)))
    tables.wait()
    say("recovery: " + ", ".join(c.label for c in contenders))
    return contenders, made
