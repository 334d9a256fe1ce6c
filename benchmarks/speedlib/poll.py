"""``scale.py --poll``: what looking for requests of manual runs costs, at 1 to 10,000 jobs.

    python benchmarks/scale.py --poll [--store memory|sqlite|URL] [--poll-jobs 1,100,10000]

A started instance asks the store for the open requests of manual runs
(pending, or claimed and not expired: the run may need a backup) with one
call, ``pending_requests()``, every ``poll_ms``, for all its jobs
(``leasecron/engine/polling.py``); the call's cost should grow with those
requests only (rule 19). For each job count N (``--poll-jobs``; the first is
the baseline), on a store of its own (``speedlib.namespaces``):

1. **Stored history.** N jobs ``job-00000`` ... each get one finished manual
   run (``request_run`` with ``max_late_ms=0``, then a ``manual`` claim: its
   request is claimed, and expires 10 s after it was made) and ``--history``
   finished scheduled runs (hourly slots, hours ago), written through the
   store's public methods (8 threads on a server, one otherwise), the manual
   runs of every job count first; then, once the store lists no request any
   more (the seeded ones expired), the measurement begins.
2. **One call, timed.** ``pending_requests()`` is called ``--poll-calls``
   times in a row, on the store itself, and the p50 of the calls is taken;
   once with no request open, then again after ``--pending`` requests were
   made for other jobs (``pending-000`` ...: no instance has them, so they
   stay pending). Each figure is the median over ``--poll-rounds`` rounds,
   after a warm-up round; in each round every job count is timed in turn, in
   the opposite order the next round, so drift on a noisy machine hits them
   alike. Each call's answer is checked (it lists exactly the pending
   requests made). ``x 1st`` is the ratio to the first job count's figure in
   the same state, measured in the same run. Beside the time: what one call
   costs the store, counted at the client: commands sent on Redis/Valkey,
   statements on PostgreSQL and SQLite. On PostgreSQL a third state is timed
   between the two, ``vacuumed``: no request open, after ``VACUUM ANALYZE``
   of the store's tables. Each request whose state changed left a dead entry
   in the index of open requests until a vacuum removes it, and a call visits
   those among the requests not expired; the first state shows what is left
   of that (the server's ``autovacuum`` setting is printed), the second what
   a vacuum leaves. The requests of the last state are made after the vacuum.
3. **An instance, counted.** A ``LeaseCron`` (``poll_ms=--poll-ms``) with the
   N jobs registered (cron schedules none of which falls due during the
   measurement, as the idle window has) on a ``DelegatingStore`` that counts
   every store call by operation; started, and once each job's start-up
   recovery read its runs and two polls went by, watched for
   ``--poll-seconds``. Shown: the ``pending_requests`` calls per ``poll_ms``
   (the issue: one per instance per ``poll_ms``, whatever N), every store
   call of the window per ``poll_ms``, and the client's count of the window
   (as in 2) per ``poll_ms``.

Printed, never asserted. The stores are removed at the end, also after an
error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import collections
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any, Callable, Dict, List

import leasecron
from leasecron import LeaseCron, Store
from leasecron.stores import DelegatingStore, MemoryStore, SQLiteStore

from .counting import CallCounter
from .namespaces import kind_of, own_store
from .pg_schema import pg_execute
from .sigterm import exit_on_sigterm
from .timing import timed

#: ``scale.not_due_schedules``: n cron strings none of which falls due within a horizon (s) from now.
Schedules = Callable[[int, float], List[str]]

HOUR_MS = 3_600_000
#: How long a pending request made here stays pending: the whole measurement.
PENDING_FOR_MS = 3_600_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``scale.py --poll``."""
    group = parser.add_argument_group("--poll: the cost of looking for requests of manual runs")
    group.add_argument("--poll", action="store_true", help="measure the poll for manual runs (not the idle window)")
    group.add_argument("--poll-jobs", default="1,100,10000", help="job counts (default 1,100,10000; the first is"
                       " the baseline)")  # fmt: skip
    group.add_argument("--poll-ms", type=int, default=100, help="the instance's poll_ms (default 100)")
    group.add_argument("--poll-seconds", type=float, default=10.0, help="the counted window (default 10)")
    group.add_argument("--history", type=int, default=2, help="finished scheduled runs per job (default 2)")
    group.add_argument("--pending", type=int, default=10, help="requests pending in the last timing (default 10)")
    group.add_argument("--poll-rounds", type=int, default=5, help="timing rounds, median shown (default 5)")
    group.add_argument("--poll-calls", type=int, default=200, help="calls per timing round (default 200)")


class CountingStore(DelegatingStore):
    """Passes every call on to the inner store and counts it, by protected method (``now_ms`` too)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = collections.Counter()
        #: When each ``poll`` call began (``time.monotonic()``): the polls (requests and schedule changes).
        self.polled_at: List[float] = []

    def add(self, name: str) -> None:
        """Count one call of ``name``."""
        with self._lock:
            self._counts[name] += 1
            if name == "_poll":
                self.polled_at.append(time.monotonic())

    def counts(self) -> Dict[str, int]:
        """The calls so far, by method."""
        with self._lock:
            return dict(self._counts)


def _counted(name: str) -> Callable[..., Any]:
    passed_on = getattr(DelegatingStore, name)

    def method(self: CountingStore, *args: Any) -> Any:
        self.add(name)
        return passed_on(self, *args)

    method.__name__ = name
    method.__doc__ = f"Count the call, then the inner store's ``{name}``."
    return method


#: The store operations :class:`CountingStore` counts: every one a store implements (the contract's
#: abstract methods: ``now_ms`` and the protected ones the public methods call), but ``close``, and
#: ``_poll``, which an instance calls once per ``poll_ms`` (a backend answers it in one round trip).
COUNTED = sorted({name for name in Store.__abstractmethods__ if name != "close"} | {"_poll"})
for _name in COUNTED:
    setattr(CountingStore, _name, _counted(_name))


def wire_counter(store: Store) -> CallCounter:
    """What ``store`` sends, counted at the client: ``speedlib.counting.CallCounter`` (Redis commands,
    PostgreSQL statements), but every statement on SQLite, where a read begins no transaction."""
    counter = CallCounter(store)
    if isinstance(store, SQLiteStore):
        connect = store._connect

        def connect_counting() -> sqlite3.Connection:
            conn = connect()  # every statement, but a BEGIN: CallCounter counts those at begin_immediate
            conn.set_trace_callback(lambda sql: None if sql.startswith("BEGIN") else counter._add())
            return conn

        store._connect = connect_counting  # type: ignore[method-assign]
        counter.unit = "statements"
    return counter


class Config:
    """One job count: its store, its client counter and its figures."""

    def __init__(self, jobs: int, store: Store, where: str) -> None:
        self.jobs = jobs
        self.store = store
        self.where = where
        self.wire = wire_counter(store)
        self.names = [f"job-{i:05d}" for i in range(jobs)]
        self.runs = 0
        self.ended = 0
        self.populate_s = 0.0
        self.pending = 0
        self.p50: Dict[str, List[float]] = {}  # the state timed -> the p50 of each round
        self.wire_per_call: Dict[str, float] = {}
        self.window: Dict[str, Any] = {}


def populate(config: Config, history: int, now_ms: int, manual: bool) -> None:
    """Give each job one finished manual run (``manual``), or ``history`` finished scheduled runs.

    A manual run's request expires 10 s after it was made (``max_late_ms=0``):
    until then the store lists it (claimed) beside the pending ones."""
    store = config.store
    oldest = now_ms - (history + 1) * HOUR_MS

    def one(name: str) -> None:
        if manual:
            request = store.request_run(name, by="seed", max_late_ms=0)
            claim = store.claim(name, request.slot_ms, runner="seed", reason="manual")
            assert claim.won and claim.run is not None, f"the manual claim of {name}: {claim}"
            store.finish(name, request.slot_ms, claim.run.token, "success")
            return
        for k in range(history):
            slot = oldest + k * HOUR_MS
            claim = store.claim(name, slot, runner="seed", max_late_ms=(history + 2) * HOUR_MS)
            assert claim.won and claim.run is not None, f"the seeding claim of {name} at {slot}: {claim}"
            store.finish(name, slot, claim.run.token, "success")

    threads = 1 if isinstance(store, (MemoryStore, SQLiteStore)) else 8
    began = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, config.names):
            pass
    config.populate_s += time.perf_counter() - began
    config.runs += config.jobs * (1 if manual else history)
    config.ended += config.jobs if manual else 0


def time_calls(config: Config, calls: int, state: str) -> float:
    """The p50 (µs) of ``calls`` calls of ``pending_requests()``, each answer checked; notes the
    client's count per call."""
    store, expected = config.store, config.pending

    def call(i: int) -> None:
        got = len(store.pending_requests())
        if got != expected:
            raise SystemExit(f"{config.jobs} jobs: pending_requests() listed {got} requests, not {expected}")

    before = config.wire.total()
    p50 = timed(call, calls).p50
    after = config.wire.total()
    if before is not None and after is not None:
        config.wire_per_call[state] = (after - before) / calls
    return p50


def time_rounds(configs: List[Config], rounds: int, calls: int, state: str) -> None:
    """A warm-up round, then ``rounds``, each timing every configuration in turn (reversed every other
    round); the figures are those of ``state``."""
    say(f"timing pending_requests(): {state}")
    for r in range(rounds + 1):
        order = configs if r % 2 == 0 else configs[::-1]
        for config in order:
            p50 = time_calls(config, calls, state)
            if r:
                config.p50.setdefault(state, []).append(p50)


def vacuum(store: Store) -> None:
    """``VACUUM ANALYZE`` every table of the store's PostgreSQL schema, as autovacuum would."""
    tables = pg_execute(store, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (store.schema,))  # type: ignore[attr-defined]
    for (table,) in tables:
        pg_execute(store, f"VACUUM ANALYZE {store.schema}.{table}")  # type: ignore[attr-defined]


def idle_handler() -> None:
    """The handler of a job that is not due (never called during the measurement)."""


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Wait until ``condition()``, checking every 10 ms; SystemExit naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not done after {timeout_s:g} s")
        time.sleep(0.01)


def watch(config: Config, args: argparse.Namespace, schedules: Schedules) -> None:
    """Start an instance with the jobs registered, wait for its boot, and count a window's calls."""
    counting = CountingStore(config.store)
    cron = LeaseCron(counting, runner=f"scale-poll-{config.jobs}", poll_ms=args.poll_ms)
    for name, schedule in zip(config.names, schedules(config.jobs, args.poll_seconds + 900)):
        cron.add_job(idle_handler, schedule, name=name)
    began = time.perf_counter()
    cron.start()
    try:
        wait_for(lambda: counting.counts().get("_unfinished", 0) >= config.jobs, 900, f"the boot of {config.jobs}")
        boot_s = time.perf_counter() - began
        polled = counting.counts().get("_poll", 0)
        wait_for(lambda: counting.counts().get("_poll", 0) >= polled + 2, 60, "two polls after the boot")
        counts0, wire0, t0 = counting.counts(), config.wire.total(), time.monotonic()
        time.sleep(args.poll_seconds)  # the window: whatever the instance does meanwhile is counted
        counts1, wire1, t1 = counting.counts(), config.wire.total(), time.monotonic()
    finally:
        cron.stop()
    calls = {name: counts1.get(name, 0) - counts0.get(name, 0) for name in counts1}
    polls = calls.get("_poll", 0)
    polled = [t for t in list(counting.polled_at) if t0 <= t <= t1]
    config.window = {
        "boot_s": boot_s,
        "polls": polls,
        "period_ms": 1000 * (polled[-1] - polled[0]) / (len(polled) - 1) if len(polled) > 1 else None,
        "calls_per_poll": sum(calls.values()) / polls if polls else None,
        "wire_per_poll": None if wire0 is None or wire1 is None or not polls else (wire1 - wire0) / polls,
        "others": {name.lstrip("_"): n for name, n in sorted(calls.items()) if n and name != "_poll"},
    }


def run(args: argparse.Namespace, schedules: Schedules) -> int:
    """``scale.py --poll``: measure every job count, then print the figures. ``schedules(n, horizon_s)``
    gives n cron strings none of which falls due within ``horizon_s`` (``scale.not_due_schedules``)."""
    try:
        kind = kind_of(args.store)
        counts = [int(x) for x in args.poll_jobs.split(",") if x.strip()]
    except ValueError as exc:
        raise SystemExit(f"--store or --poll-jobs: {exc}") from exc
    if not counts or min(counts) <= 0 or args.poll_ms <= 0 or args.poll_seconds <= 0 or args.history < 0:
        raise SystemExit("--poll-jobs, --poll-ms and --poll-seconds must be positive; --history not negative")
    if args.pending < 0 or args.poll_rounds <= 0 or args.poll_calls <= 0:
        raise SystemExit("--pending must not be negative; --poll-rounds and --poll-calls positive")
    exit_on_sigterm()
    states = ["0 pending"] + (["vacuumed"] if kind == "postgresql" else []) + [f"{args.pending} pending"]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="leasecron-poll-") as tmp, ExitStack() as stores:
        configs = []
        for n in counts:
            store, where = stores.enter_context(own_store(args.store, f"poll_{n}", tmp))
            configs.append(Config(n, store, where))
        now_ms = configs[0].store.now_ms()
        for manual in (True, False):  # the manual runs first: their requests expire meanwhile
            for config in configs:
                say(f"{config.jobs:,} jobs: writing their {'manual' if manual else 'scheduled'} runs ({config.where})")
                populate(config, args.history, now_ms, manual)
        say("waiting for the requests of the manual runs to expire (10 s after the last one)")
        for config in configs:
            wait_for(lambda: not config.store.pending_requests(), 60, "the seeded requests to expire")  # noqa: B023
        time_rounds(configs, args.poll_rounds, args.poll_calls, states[0])
        if kind == "postgresql":
            for config in configs:
                vacuum(config.store)
            time_rounds(configs, args.poll_rounds, args.poll_calls, states[1])
        for config in configs:
            for i in range(args.pending):
                config.store.request_run(f"pending-{i:03d}", by="scale-poll", max_late_ms=PENDING_FOR_MS)
            config.pending = args.pending
        time_rounds(configs, args.poll_rounds, args.poll_calls, states[-1])
        for config in configs:
            say(f"{config.jobs:,} jobs: an instance polling every {args.poll_ms} ms, {args.poll_seconds:g} s counted")
            watch(config, args, schedules)
        server = "" if kind == "memory" else f", {configs[0].store.server_version()}"
        if kind == "postgresql":
            server += ", autovacuum " + pg_execute(configs[0].store, "SHOW autovacuum")[0][0]  # type: ignore[arg-type]
    print_figures(configs, args, kind, server, states)
    print(f"({time.monotonic() - began:.0f} s in all)")
    return 0


def say(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def print_figures(configs: List[Config], args: argparse.Namespace, kind: str, server: str, states: List[str]) -> None:
    """The two tables and the verdict."""
    shown = "a temporary SQLite file" if kind == "sqlite" else "a new MemoryStore" if kind == "memory" else args.store
    unit = configs[0].wire.unit or ""
    print(f"leasecron {leasecron.__version__}, store {kind} ({shown}{server}), Python {sys.version.split()[0]},"
          f" {os.cpu_count()} CPUs; one store of its own per job count")  # fmt: skip
    print(f"each job: {args.history} finished scheduled run(s) and 1 finished manual run (its request claimed,"
          " and expired before the timing)")  # fmt: skip
    print()
    print(f"pending_requests(), one call: p50 of {args.poll_calls} calls, median of {args.poll_rounds} rounds"
          f" (job counts alternating); x 1st: against {configs[0].jobs:,} job(s), same run")  # fmt: skip
    head = f"{'jobs':>7} {'runs':>7} {'ended req':>9} {'write s':>8}"
    for state in states:
        head += f" {state + ' us':>14} {'x 1st':>6}"
    width = max(16, 7 * len(states))
    print(head + (f" {unit + '/call':>{width}}" if unit else ""))
    base = {state: statistics.median(v) for state, v in configs[0].p50.items()}
    for config in configs:
        line = f"{config.jobs:>7,} {config.runs:>7,} {config.ended:>9,} {config.populate_s:8.1f}"
        for state in states:
            p50 = statistics.median(config.p50[state])
            line += f" {p50:14.1f} {p50 / base[state]:6.2f}"
        if unit:
            line += f" {' / '.join(f'{config.wire_per_call[state]:.2f}' for state in states):>{width}}"
        print(line)
    if unit:
        print(f"{unit}/call: what one call sent, counted at the client ({' / '.join(states)})")
    if "vacuumed" in states:
        print("vacuumed: 0 pending, after VACUUM ANALYZE of the store's tables (the ended requests' dead index")
        print(f"entries gone, as autovacuum would leave them); {args.pending} pending: made after the VACUUM")
    print()
    print(f"an instance with the jobs registered, poll_ms {args.poll_ms}: the store calls of {args.poll_seconds:g} s"
          " after its boot (every job recovered, two polls done),")  # fmt: skip
    print(f"with {args.pending} requests of other jobs pending")
    print(f"{'jobs':>7} {'boot s':>7} {'polls':>6} {'period ms':>9} {'calls/poll':>10}"
          f" {(unit or 'client') + '/poll':>15}  other calls in the window")  # fmt: skip
    for config in configs:
        w = config.window
        cells = [f"{w[k]:.2f}" if w[k] is not None else "-" for k in ("period_ms", "calls_per_poll", "wire_per_poll")]
        others = ", ".join(f"{name} {n}" for name, n in w["others"].items()) or "none"
        line = f"{config.jobs:>7,} {w['boot_s']:7.2f} {w['polls']:>6} {cells[0]:>9} {cells[1]:>10} {cells[2]:>15}"
        print(f"{line}  {others}")
    print("polls: poll() calls (requests and schedule changes) in the window; period: the mean time from one to the")
    print("next; calls/poll:")
    print(f"every store call of the window per poll; {unit or 'client'}/poll: what it sent (at the client) per poll")
    print()
    met = all(
        w["polls"] > 1 and w["calls_per_poll"] <= 1.05 and args.poll_ms <= w["period_ms"] <= 1.1 * args.poll_ms
        for w in (c.window for c in configs)
    )
    print(f"one store call per poll_ms per instance, whatever the number of jobs: {'met' if met else 'MISSED'}"
          " (calls per poll at most 1.05, a period within 10 % over poll_ms, at every job count)")  # fmt: skip
    top = configs[-1]
    ratios = [f"{statistics.median(top.p50[state]) / base[state]:.2f}x {state}" for state in states]
    print(f"pending_requests() at {top.jobs:,} jobs and {top.runs:,} runs against {configs[0].jobs:,} job(s): "
          + ", ".join(ratios))  # fmt: skip
