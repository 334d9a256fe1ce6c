"""What registered jobs cost an idle instance: memory, threads, CPU and scheduler wake-ups.

    python benchmarks/scale.py [--jobs 1000,10000] [--seconds 30] [--due 3] [--store memory|sqlite]

What it measures. For each configuration (the baseline with 0 registered
jobs first, then each ``--jobs`` count) a fresh Python process (this file run
with ``--config N``) builds one ``LeaseCron`` on a ``MemoryStore`` (or a
temporary SQLite file with ``--store sqlite``), registers N jobs that are
*not due* during the measurement, plus ``--due`` jobs that are (every
``--due-every`` seconds, a handler that works ``--work`` seconds), starts it,
waits until every job's start-up recovery has read its unfinished runs (the
boot is done), and then watches it for ``--seconds``:

* **memory**: ``VmRSS`` from ``/proc/self/status`` before registering, after
  registering and at the end of the window (``VmHWM``, the peak, beside it);
  shown in MiB, as the increase over the baseline and in KiB per job;
* **threads**: ``threading.active_count()`` and ``Threads`` of
  ``/proc/self/status``, sampled every 0.25 s with the number of live runs
  (``cron.live_runs()``) and the threads by name (the scheduler, the claim
  pool ``leasecron-claims_*``, a run thread per live run and a heartbeat
  thread once it has run for a heartbeat, idle workers ``leasecron-worker``
  that wait 10 s for the next run); the table shows the threads while no run was live and the most seen
  with the most live runs;
* **CPU**: ``time.process_time()`` (every thread of the process) over the
  window, as a percentage of one core, and its increase over the baseline;
  the due jobs' runs and the 0.25 s sampling are in every configuration,
  the baseline included;
* **scheduler wake-ups**: the scheduler thread (``leasecron/engine/scheduler.py``)
  sleeps on a condition variable until its earliest entry is due; each
  return from that wait is a wake-up. The benchmark counts them by patching,
  from the outside, ``leasecron.engine.core.Scheduler`` with a subclass whose
  condition variable counts its waits (leasecron itself is not changed); it
  also counts the entries the thread ran (each planned entry is wrapped) and
  shows how many the heap holds (one per job's next slot). Shown per minute
  and as a ratio to the baseline.

It also shows the time to register the jobs, to boot (``start()`` until
every recovery read its runs) and to ``stop()``.

Jobs that are not due: cron strings in UTC, hourly (``M * * * *``), daily
(``M H * * *``), weekly (``M H * * D``) and monthly (``M H D * *``), spread
over the hours and minutes but never at a minute that falls due between
``catch_up_ms`` (5 minutes) plus a minute before the process starts and the
end of its run plus 5 minutes: none of them is claimed, caught up or run
during the measurement. The due jobs are epoch-aligned intervals, so they
start together and the live runs (and their threads) come and go at once.

Targets (printed, not asserted): threads grow with live runs, not with
registered jobs (the same threads without live runs in every configuration,
but for the claim pool, which grows lazily to ``claim_threads`` = 4, the
idle workers, no more than the most live runs seen, and one or two threads
per live run); idle CPU under 2 % of one core at 10,000 jobs (the
absolute figure, the due jobs' runs included).

``--poll`` measures instead what looking for requests of manual runs costs
(``pending_requests()``, one call per ``poll_ms`` per instance whatever the
number of jobs), on any store (``--store memory``, ``sqlite`` or a Redis,
Valkey or PostgreSQL URL), at 1, 100 and 10,000 jobs with their stored
runs: ``benchmarks/speedlib/poll.py`` says how. For example::

    python benchmarks/scale.py --poll --store redis://127.0.0.1:6379/0

Every configuration runs in a process of its own, so that one's memory and
threads cannot show in the next; a child whose parent died exits at once
(its stdin closes). The default run (3 windows of 30 s plus start-up) takes
under 2 minutes. A quick look::

    python benchmarks/scale.py --jobs 1000 --seconds 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import leasecron
import leasecron.engine.core
from leasecron import Context, LeaseCron, MemoryStore, Run, Store, open_store
from leasecron.engine.clock import StoreClock
from leasecron.engine.scheduler import Scheduler
from leasecron.engine.workers import IDLE_NAME
from leasecron.events import Emitter

#: How often the threads are sampled during the window, in seconds.
SAMPLE_S = 0.25
#: The engine's default ``catch_up_ms``, in seconds: a not-due job's last slot stays older.
CATCH_UP_S = 300
#: The idle CPU target at the largest configuration, in % of one core.
CPU_TARGET = 2.0
#: The default size of the claim pool (``LeaseCron(claim_threads=4)``).
CLAIM_THREADS = 4

Result = Dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Counting the scheduler's wake-ups, from the outside
# ---------------------------------------------------------------------------------------------


class CountingCondition(threading.Condition):
    """A condition variable that counts the returns from :meth:`wait` (the scheduler's wake-ups)."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.wakeups = 0

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait as usual, then count the wake-up (the lock is held again: no race)."""
        woken = super().wait(timeout)
        self.wakeups += 1
        return woken


class CountingScheduler(Scheduler):
    """:class:`leasecron.engine.scheduler.Scheduler` that counts the scheduler thread's wake-ups and the tasks it runs.

    Installed as ``leasecron.engine.core.Scheduler`` while a ``LeaseCron`` starts, so its
    engine builds this one; the last one built is :attr:`latest`.
    """

    latest: Optional["CountingScheduler"] = None

    def __init__(self, clock: StoreClock, events: Emitter) -> None:
        super().__init__(clock, events)
        self.counting = CountingCondition()
        self._cond = self.counting  # before the thread starts, so it only ever waits on this one
        self.ran = 0
        CountingScheduler.latest = self

    def _push(self, heap: List[Any], due: float, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        """Plan ``fn(*args)`` as usual (on either heap), wrapped so that its run is counted."""
        super()._push(heap, due, self._counted, (fn, *args))

    def _counted(self, fn: Callable[..., Any], *args: Any) -> None:
        self.ran += 1  # only ever in the scheduler thread
        fn(*args)

    def entries(self) -> int:
        """How many entries the heaps hold now (store-clock and monotonic ones)."""
        with self.counting:
            return len(self._store_heap) + len(self._mono_heap)


# ---------------------------------------------------------------------------------------------
# The jobs
# ---------------------------------------------------------------------------------------------


def busy_minutes(start: dt.datetime, before_s: float, after_s: float) -> Tuple[Set[int], Set[Tuple[int, int]]]:
    """The minutes of the hour, and the (hour, minute) pairs of the day, that fall
    between ``before_s`` seconds before ``start`` and ``after_s`` seconds after it."""
    minutes: Set[int] = set()
    hours_minutes: Set[Tuple[int, int]] = set()
    t = start - dt.timedelta(seconds=before_s)
    end = start + dt.timedelta(seconds=after_s)
    while t <= end + dt.timedelta(minutes=1):
        minutes.add(t.minute)
        hours_minutes.add((t.hour, t.minute))
        t += dt.timedelta(minutes=1)
    return minutes, hours_minutes


def not_due_schedules(count: int, horizon_s: float) -> List[str]:
    """``count`` cron strings (UTC) none of which falls due from ``CATCH_UP_S`` + 60 s ago
    until ``horizon_s`` from now: hourly, daily, weekly and monthly, spread out."""
    now = dt.datetime.now(dt.timezone.utc)
    busy_m, busy_hm = busy_minutes(now, CATCH_UP_S + 60, horizon_s)
    hourly = [m for m in range(60) if m not in busy_m]
    daily = [(h, m) for h in range(24) for m in range(60) if (h, m) not in busy_hm]
    out = []
    for i in range(count):
        kind = i % 4
        if kind == 0 and hourly:
            out.append(f"{hourly[(i // 4) % len(hourly)]} * * * *")
            continue
        h, m = daily[(i * 7919) % len(daily)]  # a prime stride spreads them over the day
        if kind == 2:
            out.append(f"{m} {h} * * {i % 7}")
        elif kind == 3:
            out.append(f"{m} {h} {1 + i % 28} * *")
        else:
            out.append(f"{m} {h} * * *")
    return out


def idle_handler() -> None:
    """The handler of a job that is not due (never called during the measurement)."""


def make_due_handler(work_s: float) -> Callable[[Context], None]:
    """A due job's handler: works ``work_s`` seconds, or less if its run is aborted."""

    def handler(ctx: Context) -> None:
        ctx.signal.wait(work_s)

    return handler


# ---------------------------------------------------------------------------------------------
# One configuration (the child process)
# ---------------------------------------------------------------------------------------------


def proc_status() -> Dict[str, int]:
    """VmRSS and VmHWM (KiB) and Threads of this process, from ``/proc/self/status``."""
    out: Dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
    return out


def thread_kinds() -> Dict[str, int]:
    """The live Python threads by kind: scheduler, pool, run, heartbeat, other."""
    kinds = {"scheduler": 0, "pool": 0, "run": 0, "heartbeat": 0, "worker": 0, "other": 0}
    for t in threading.enumerate():
        name = t.name
        if name == "leasecron-scheduler":
            kinds["scheduler"] += 1
        elif name.startswith("leasecron-claims"):
            kinds["pool"] += 1
        elif name.startswith("leasecron-run-"):
            kinds["run"] += 1
        elif name.startswith("leasecron-heartbeat-"):
            kinds["heartbeat"] += 1
        elif name == IDLE_NAME:
            kinds["worker"] += 1
        else:
            kinds["other"] += 1
    return kinds


def count_unfinished(store: Store) -> Callable[[], int]:
    """Count the store's ``unfinished()`` calls (one per job's start-up recovery); returns a reader.

    The wrapper is set on this store object only; leasecron is not changed.
    """
    original = store.unfinished
    lock = threading.Lock()
    done = [0]

    def unfinished(job: str) -> List[Run]:
        runs = original(job)
        with lock:
            done[0] += 1
        return runs

    store.unfinished = unfinished  # type: ignore[method-assign]
    return lambda: done[0]


def run_config(args: argparse.Namespace) -> Result:
    """Measure one configuration in this process; the figures as a dict."""
    n = args.config
    before = proc_status()
    if args.store == "sqlite":
        store: Store = open_store(f"sqlite:///{os.path.join(args.tmp, f'scale-{n}-{os.getpid()}.db')}")
    else:
        store = MemoryStore()
    recovered = count_unfinished(store)
    cron = LeaseCron(store, runner=f"scale-{n}")
    due_handler = make_due_handler(args.work)
    for i in range(args.due):
        cron.add_job(due_handler, args.due_every, name=f"due-{i}")
    horizon = args.seconds + 300  # the window plus ample start-up and stop
    t0 = time.perf_counter()
    for i, schedule in enumerate(not_due_schedules(n, horizon)):
        cron.add_job(idle_handler, schedule, name=f"job-{i:05d}")
    register_s = time.perf_counter() - t0
    registered = proc_status()

    original_scheduler = leasecron.engine.core.Scheduler
    leasecron.engine.core.Scheduler = CountingScheduler  # type: ignore[misc]
    try:
        t0 = time.perf_counter()
        cron.start()
    finally:
        leasecron.engine.core.Scheduler = original_scheduler  # type: ignore[misc]
    scheduler = CountingScheduler.latest
    assert scheduler is not None, "the engine did not build the counting scheduler"
    total = n + args.due
    deadline = time.monotonic() + 300
    while recovered() < total:
        if time.monotonic() > deadline:
            raise SystemExit(f"boot not done after 300 s: {recovered()} of {total} jobs recovered")
        time.sleep(0.01)
    boot_s = time.perf_counter() - t0
    time.sleep(1.0)  # let the boot's last claims (the due jobs' catch-up) and allocations settle

    samples: List[Dict[str, int]] = []
    wake0, ran0 = scheduler.counting.wakeups, scheduler.ran
    cpu0, wall0 = time.process_time(), time.monotonic()
    end = wall0 + args.seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        sample = thread_kinds()
        sample["active"] = threading.active_count()
        sample["os"] = proc_status()["Threads"]
        sample["live"] = len(cron.live_runs())
        samples.append(sample)
        time.sleep(min(SAMPLE_S, max(0.0, end - time.monotonic())))
    cpu1, wall1 = time.process_time(), time.monotonic()
    wake1, ran1 = scheduler.counting.wakeups, scheduler.ran
    entries = scheduler.entries()
    after = proc_status()

    t0 = time.perf_counter()
    cron.stop()
    stop_s = time.perf_counter() - t0
    store.close()

    window = wall1 - wall0
    idle = [s for s in samples if s["live"] == 0 and s["run"] == 0 and s["heartbeat"] == 0]
    busiest = max(samples, key=lambda s: (s["live"], s["active"]))
    return {
        "jobs": n,
        "due": args.due,
        "register_s": register_s,
        "boot_s": boot_s,
        "stop_s": stop_s,
        "rss_start_kib": before["VmRSS"],
        "rss_registered_kib": registered["VmRSS"],
        "rss_kib": after["VmRSS"],
        "hwm_kib": after["VmHWM"],
        "window_s": window,
        "cpu_pct": 100.0 * (cpu1 - cpu0) / window,
        "wakeups_per_min": 60.0 * (wake1 - wake0) / window,
        "tasks_per_min": 60.0 * (ran1 - ran0) / window,
        "timer_entries": entries,
        "threads_idle": max((s["active"] for s in idle), default=None),
        "os_threads_idle": max((s["os"] for s in idle), default=None),
        "pool_idle": max((s["pool"] for s in idle), default=None),
        "other_idle": max((s["other"] + s["scheduler"] for s in idle), default=None),
        "workers_idle": max((s["worker"] for s in idle), default=None),
        "threads_max": max(s["active"] for s in samples),
        "os_threads_max": max(s["os"] for s in samples),
        "live_max": max(s["live"] for s in samples),
        "busiest": busiest,
        "samples": len(samples),
    }


def child_main(args: argparse.Namespace) -> int:
    """Measure one configuration and print its figures as one JSON line."""
    exit_when_parent_goes()
    result = run_config(args)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


def exit_when_parent_goes() -> None:
    """Exit at once when stdin closes: the parent died without killing this process."""

    def watch() -> None:
        # os.read on the descriptor, not sys.stdin: a daemon thread blocked inside
        # sys.stdin's buffered reader would make CPython abort at interpreter shutdown.
        try:
            while os.read(0, 4096):
                pass
        finally:
            os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


# ---------------------------------------------------------------------------------------------
# The parent: one child per configuration, then the table
# ---------------------------------------------------------------------------------------------


def measure_in_child(n: int, args: argparse.Namespace, tmp: str) -> Result:
    """Run configuration ``n`` in a fresh process; its figures. The child is killed on any exit."""
    cmd = [
        sys.executable, os.path.abspath(__file__),
        "--config", str(n),
        "--seconds", repr(args.seconds),
        "--due", str(args.due),
        "--due-every", repr(args.due_every),
        "--work", repr(args.work),
        "--store", args.store,
        "--tmp", tmp,
    ]  # fmt: skip
    return json_from_child(cmd, args.seconds + 600, f"configuration with {n} jobs")


def json_from_child(cmd: List[str], timeout_s: float, what: str) -> Result:
    """Run ``cmd`` (a child that exits when its stdin closes: :func:`exit_when_parent_goes`) and
    read the JSON line it printed last; the child is killed on any exit, SystemExit naming
    ``what`` if it failed."""
    # stdin stays open (the child exits when it closes), so no communicate(): a thread reads stdout
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    chunks: List[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read() if proc.stdout else b""), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
        reader.join(10)
        out = b"".join(chunks)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode})")
    result: Result = json.loads(out.decode().strip().splitlines()[-1])
    return result


def mib(kib: Optional[float]) -> str:
    """KiB as MiB with one decimal, or ``-``."""
    return "-" if kib is None else f"{kib / 1024:.1f}"


def ratio(value: float, base: float) -> str:
    """``value / base`` with two decimals, or ``-`` when the base is 0."""
    return f"{value / base:.2f}" if base > 0 else "-"


def print_table(results: List[Result]) -> None:
    """The figures of every configuration, the first (0 jobs) being the baseline: set-up and memory,
    then the idle window."""
    base = results[0]
    labels = [f"{r['jobs']:,}" if r["jobs"] else "0 (base)" for r in results]
    print(f"{'jobs':>9} {'register s':>10} {'boot s':>7} {'stop s':>7} {'reg MiB':>8} {'RSS MiB':>8}"
          f" {'+RSS MiB':>8} {'KiB/job':>8} {'peak MiB':>8} {'timers':>7}")  # fmt: skip
    for label, r in zip(labels, results):
        extra_kib = r["rss_kib"] - base["rss_kib"]
        per_job = f"{extra_kib / r['jobs']:.2f}" if r["jobs"] else "-"
        print(
            f"{label:>9} {r['register_s']:10.2f} {r['boot_s']:7.2f} {r['stop_s']:7.2f}"
            f" {mib(r['rss_registered_kib'] - r['rss_start_kib']):>8} {mib(r['rss_kib']):>8}"
            f" {mib(extra_kib):>8} {per_job:>8} {mib(r['hwm_kib']):>8} {r['timer_entries']:>7}"
        )
    print("register: add_job of every job; boot: start() until every job's recovery read its runs; reg: RSS")
    print("added by the add_job calls; RSS at the end of the window, +RSS over the baseline's, per registered")
    print("job; peak: VmHWM; timers: entries in the scheduler's heap")
    print()
    print(f"{'jobs':>9} {'thr idle':>8} {'(OS)':>5} {'pool':>5} {'thr max':>8} {'live':>5} {'CPU %':>7}"
          f" {'+CPU':>6} {'wake/min':>9} {'x base':>7} {'tasks/min':>9}")  # fmt: skip
    for label, r in zip(labels, results):
        idle = "-" if r["threads_idle"] is None else str(r["threads_idle"])
        os_idle = "-" if r["os_threads_idle"] is None else str(r["os_threads_idle"])
        pool = "-" if r["pool_idle"] is None else str(r["pool_idle"])
        print(
            f"{label:>9} {idle:>8} {os_idle:>5} {pool:>5} {r['threads_max']:>8} {r['live_max']:>5}"
            f" {r['cpu_pct']:7.2f} {r['cpu_pct'] - base['cpu_pct']:+6.2f} {r['wakeups_per_min']:9.1f}"
            f" {ratio(r['wakeups_per_min'], base['wakeups_per_min']):>7} {r['tasks_per_min']:9.1f}"
        )
    print("thr idle: threading.active_count() while no run was live (OS: /proc Threads; pool: claim-pool")
    print("threads among them); thr max: the most seen, with the most live runs (live); CPU: process time")
    print("over the window in % of one core (+CPU over the baseline); wake/min: returns of the scheduler")
    print("thread's wait per minute (x base: ratio to the baseline); tasks/min: the entries it ran")


def print_targets(results: List[Result]) -> None:
    """The two targets, judged on the figures (not asserted)."""
    base, top = results[0], results[-1]
    idle_ok = all(
        r["other_idle"] is not None
        and r["other_idle"] == base["other_idle"]
        and (r["pool_idle"] or 0) <= CLAIM_THREADS
        and (r["workers_idle"] or 0) <= r["live_max"]
        for r in results
    )
    per_live = []
    for r in results:
        b = r["busiest"]
        if b["live"]:
            per_live.append((b["run"] + b["heartbeat"]) / b["live"])
    live_ok = bool(per_live) and all(1 <= x <= 2 for x in per_live)
    print()
    print("threads grow with live runs, not with registered jobs: "
          + ("met" if idle_ok and (live_ok or not per_live) else "MISSED")
          + " (without live runs: "
          + ", ".join(f"{r['jobs']:,} jobs {r['threads_idle']} (pool {r['pool_idle']})" for r in results)
          + "; at the most live runs: "
          + (", ".join(f"{x:.1f}" for x in per_live) + " threads per live run" if per_live else "no run was live")
          + ")")  # fmt: skip
    if not per_live and base["due"]:
        print("  (no live run was sampled: raise --work or --seconds)")
    verdict = "met" if top["cpu_pct"] < CPU_TARGET else "MISSED"
    print(f"idle CPU < {CPU_TARGET:g} % of a core at {top['jobs']:,} jobs: {verdict}"
          f" ({top['cpu_pct']:.2f} %, baseline {base['cpu_pct']:.2f} %)")  # fmt: skip


def main() -> int:
    """Parse the arguments; run each configuration (or, with ``--config``, measure one)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--jobs", default="1000,10000", help="registered job counts, comma-separated"
                        " (default 1000,10000; the 0-job baseline is always measured first)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=30.0, help="the window per configuration (default 30)")
    parser.add_argument("--due", type=int, default=3, help="jobs that are due during the window (default 3)")
    parser.add_argument("--due-every", type=float, default=5.0, help="the due jobs' interval in s (default 5)")
    parser.add_argument("--work", type=float, default=1.0, help="how long a due job's handler works, s (default 1)")
    parser.add_argument("--store", default="memory", help="memory or sqlite; with --poll, also a Redis, Valkey or"
                        " PostgreSQL URL (default: memory)")  # fmt: skip
    parser.add_argument("--config", type=int, help=argparse.SUPPRESS)  # the child: measure one configuration
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    from speedlib import poll  # benchmarks/ is on sys.path: this file's directory

    poll.add_arguments(parser)
    args = parser.parse_args()
    if args.poll:
        return poll.run(args, not_due_schedules)
    if args.store not in ("memory", "sqlite"):
        parser.error("--store must be memory or sqlite (a server's URL only with --poll)")
    if args.config is not None:
        return child_main(args)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # so the child is killed
    try:
        counts = [int(x) for x in args.jobs.split(",") if x.strip()]
    except ValueError:
        parser.error("--jobs must be comma-separated integers")
    if any(c <= 0 for c in counts) or args.seconds <= 0 or args.due < 0 or args.due_every <= 0 or args.work < 0:
        parser.error("--jobs must be positive; --seconds and --due-every positive; --due and --work not negative")
    began = time.monotonic()
    results: List[Result] = []
    with tempfile.TemporaryDirectory(prefix="leasecron-scale-") as tmp:
        for n in [0] + counts:
            results.append(measure_in_child(n, args, tmp))
    print(f"leasecron {leasecron.__version__}, store {args.store}, Python {sys.version.split()[0]},"
          f" {os.cpu_count()} CPUs; window {args.seconds:g} s per configuration, one process each")  # fmt: skip
    print(f"every configuration also has {args.due} due job(s) every {args.due_every:g} s working {args.work:g} s;"
          f" the first line (0 registered jobs) is the baseline")  # fmt: skip
    print()
    print_table(results)
    print_targets(results)
    print(f"({time.monotonic() - began:.0f} s in all)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
