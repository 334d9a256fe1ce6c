"""Fire lag: how late each slot's handler starts, and how often it runs, on M instance processes.

    python benchmarks/fire_lag.py [--store URL] [--instances 3] [--jobs 100] [--slots 20] [--burst 1000]
                                  [--claim-threads 4] [--repeat N] [--profile DIR]

With the defaults it runs for about 70 s. Two phases, each on M fresh
instance processes (this script run with ``--instance``), each instance a
``LeaseCron(store, runner="i<n>", jitter_ms=0)`` with the library's other
defaults and the same jobs, whose handler only notes when it started
(``time.time_ns()``) and returns:

* **steady**: J jobs ``job<i>`` on a 1 s interval; the measured window is N
  consecutive slots, chosen once every instance is up;
* **burst**: B jobs ``burst<i>`` due in the same second (the cron string
  ``"* * * * * <s>,<s + 12>"``, with ``catch_up_ms=0`` so that the previous
  minute's slots are not caught up on start). The first of the two slots is a
  warm-up, only summed up: it is each job's first slot, when each instance
  meets the job for the first time (on Redis it registers the job then, one
  more round trip), as no job of a running service is. The second is measured.

For each phase it prints:

* **lag** after the slot, on the store's clock, p50, p99 and max, in ms and
  in units of the store's bare round trip: when the winning claim was sent
  (``time.time_ns()`` as the instance called ``store.claim``), when it reached
  the store (``Run.started_ms``, read back from the store), when the handler
  started (its ``time.time_ns()``; target: p99 < 50 ms), and the handler's
  start after its claim reached the store. Wall times are put on the store's
  clock with the offset measured below. For the burst, the max is the time
  from the slot to the last of its B handlers' start. Last, **answer ->
  handler**: from the moment the winning claim's answer came back to the
  instance (its store wrapper, :class:`CountingStore`, notes
  ``time.monotonic_ns()`` as ``claim_many`` or ``claim`` returns, before it
  counts anything) to the handler's first line (its ``time.monotonic_ns()``),
  both on the instance's own clock: the engine's dispatch of a won run, with
  no clock offset and no network in it (a batch's answer is one instant for
  all its runs, so the runs started last show the wait of a batch);
* **runs per slot**: for every (job, slot) due in the window, how many handler
  starts the instances logged (0, 1, more; target: exactly 1), what the store
  recorded (``store.runs(job, limit)``: success at attempt 1 is the only right
  answer), and how the runs were spread over the instances;
* **store calls per run**: each instance wraps its store in a
  :class:`CountingStore` that counts (and times) every call, by operation and,
  for claims, by reason and outcome (``claim schedule -> running``). A call
  about a slot is charged to that slot, so a backup's takeover check 5-10 s
  later still counts (a batch, ``claim_many`` or ``finish_many``, is one
  call, charged to its slot when all of it is of one); each phase therefore
  runs ``2 x heartbeat_ms + 1.5 s`` past its last slot before the instances
  stop. Other calls (``now_ms``,
  ``unfinished``) count while the window is open. A call that raised counts
  as ``<operation> -> <error type>`` (it is retried). Beside it, what the
  calls made in the window cost at the client, counted as ``store_ops.py``
  counts it (``CallCounter``): Redis commands, PostgreSQL statements, SQLite
  transactions (on SQLite ``now_ms`` and reads begin none). On Redis a job's
  first claim in a process adds an ``SADD`` (it registers the job);
* **CPU** of each instance over the window (user + system, ``os.times()`` in
  the instance, from 0.5 s before the first slot to 0.5 s before the slot after
  the last; for the burst to the end of the backups' checks), as % of one core,
  and all instances' CPU per run;
* **this host over the window** (``burstlib/host.py``, as ``burst.py``
  prints it): the cores busy, of which the instances, the store's server
  (Redis/Valkey: its ``INFO cpu``; PostgreSQL: every ``postgres`` process of
  this host) and everything else (other processes of a shared machine: the
  first thing to read beside a lag), and the load average at the end.

``--repeat N`` runs the phases N times, each on fresh instance processes and
the same store (the baselines are measured once), prints each run's report,
then per phase the median, the range (min-max) and each run's value of the
headline figures (``speedlib/repeats.py``): the handler's start p50, p99 and
max, its start after the claim and after the claim's answer (p50, p99), the
slots run exactly once, store calls and CPU per run, the busy cores of the
host and of everything else, and the load. A target is read from the median;
a run far from it is a noisy one (its host line says why).

``--profile DIR`` runs each instance's threads under cProfile
(``burstlib/threads.py``, as ``burst.py --profile``), from the opening of
each phase's window to the instances' stop, and prints per kind of thread
(the claim pool, the scheduler, the workers that run handlers and
heartbeats) the functions that took the most CPU (``burstlib/profiles.py``).
Profiling slows every call down: read the lags from a run without it.

Baselines, measured in the same run before the instances start: the store's
bare round trip as ``store_ops.py`` measures it (SQLite: ``BEGIN IMMEDIATE`` +
``INSERT`` + ``COMMIT``; Redis/Valkey: ``EVALSHA`` of ``return 1``;
PostgreSQL: ``SELECT 1``), ``store.now_ms()``, and the store's clock against
this host's (from the ``now_ms()`` reading with the shortest round trip; the
instances run on this host, so one offset serves them all).

Targets, printed beside the figures (not asserted): handler start p99 under
50 ms with 100 jobs on 3 instances; exactly one run per slot.

Stores: the default is a fresh SQLite file in a temporary directory. Any
other URL works (``sqlite:////abs/new.db``, ``redis://127.0.0.1:6379/0``,
``valkey://…``, ``postgresql://127.0.0.1:5432/test``); ``memory://`` cannot
be shared by processes. The benchmark writes only where it made sure nothing
was, and removes it at the end, also after an error, Ctrl-C or SIGTERM:

* SQLite: the file must not exist yet; it is deleted at the end;
* Redis/Valkey: without ``prefix=`` it uses ``leasecron_firelag_<pid>``; it
  refuses to run if any key of its jobs exists under the prefix, and deletes
  its jobs' keys (and their names in ``<prefix>:jobs``) at the end;
* PostgreSQL: without ``schema=`` it creates ``leasecron_firelag_<pid>``
  (refusing one that exists) and drops it at the end; with ``schema=`` it
  refuses if its jobs have runs there, deletes their rows at the end (the
  store's tables and functions stay, as leasecron creates them on first use),
  and drops the schema only if it had to create it.

A SIGKILL of this script leaves them behind; its instances notice their
closed control pipe and stop on their own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from typing import IO, Any, Callable, Dict, Generic, Iterator, List, Optional, Sequence, Tuple, TypeVar
from urllib.parse import urlsplit

from burstlib.host import HostSampler, host_line, server_cpu_of, shares
from burstlib.profiles import print_profiles
from burstlib.threads import ThreadProfiles
from peerslib.child import ControlPipe, stop_on_signals
from speedlib.bare import bare_round_trip
from speedlib.counting import CallCounter
from speedlib.pg_schema import postgres_bench_store
from speedlib.repeats import print_repeats
from speedlib.sigterm import exit_on_sigterm
from speedlib.timing import timed
from speedlib.urls import url_options, with_option

import leasecron
from leasecron import Claim, Context, Event, LeaseCron, Run, Store, open_store
from leasecron.engine.clock import StoreClock
from leasecron.stores import ClaimRequest, DelegatingStore, Finish, SQLiteStore
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys, schedule_key
from leasecron.stores.redis_scripts import instances_keys

#: The namespace (Redis prefix, PostgreSQL schema) the benchmark makes for itself.
OWN_NAMESPACE = "leasecron_firelag_{pid}"
#: Targets printed beside the figures.
TARGET_P99_MS = 50.0
TARGET_SETUP = (100, 3)  # (jobs, instances) the lag target is stated for
#: The CPU window opens this long before the first slot and closes this long before the slot after the last.
WINDOW_LEAD_MS = 500
#: How long instances may take to start (imports, connecting) and to stop.
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: How long an instance waits for its jobs' start-up (one ``unfinished`` read per job).
BOOT_TIMEOUT_S = 30.0
#: Bare round trips: rounds x operations, the median round is shown (as store_ops.py).
BARE_ROUNDS, BARE_OPS = 5, 200
#: Readings of ``store.now_ms()`` for its round trip and the clock offset.
CLOCK_READS = 50
#: Events an instance counts (``start`` and ``success`` are what every run does).
COUNTED_EVENTS = ("skip", "lost", "failed", "handover", "error")

STEADY, BURST = "steady", "burst"
#: The burst jobs' warm-up slot comes this long before the measured one: longer than a backup's
#: checks of it take (2 x heartbeat_ms + 1 s with the default lease), so they are over by then.
BURST_WARMUP_S = 12

T = TypeVar("T")


# ===================================================================================
# The instance process
# ===================================================================================


class CountingStore(DelegatingStore):
    """A real store whose every call is counted and timed, then passed on unchanged.

    Calls about a slot (claim, heartbeat, finish, release, get_run, and the
    batches ``claim_many`` and ``finish_many``) are counted per ``(operation,
    slot_ms)``; the operation names a claim's reason and outcome (``claim
    schedule -> won``) and whether a heartbeat, finish or release was
    accepted. Other calls (``now_ms``, ``unfinished``, ``runs``,
    ``jobs``) are counted per operation. A call that raised counts as
    ``<operation> -> <exception type>``.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._lock = threading.Lock()
        #: (operation, slot_ms) -> [calls, nanoseconds]
        self.by_slot: Dict[Tuple[str, int], List[int]] = {}
        #: operation -> [calls, nanoseconds], for calls about no slot
        self.other: Dict[str, List[int]] = {}
        #: every call so far
        self.total = 0
        #: (job, slot_ms) -> time.time_ns() when the claim that won its attempt was sent
        self.won_sent: Dict[Tuple[str, int], int] = {}
        #: (job, slot_ms) -> time.monotonic_ns() when the answer of that claim came back from the store
        self.won_answer: Dict[Tuple[str, int], int] = {}

    def _call(
        self, name: str, slot_ms: Optional[int], call: Callable[[], T], outcome: Optional[Callable[[T], str]] = None
    ) -> T:
        """``call()``, counted as ``outcome(result)`` (default ``name``) or as ``<name> -> <error type>``."""
        start = time.perf_counter_ns()
        try:
            result = call()
        except Exception as exc:
            self._count(f"{name} -> {type(exc).__name__}", slot_ms, time.perf_counter_ns() - start)
            raise
        self._count(name if outcome is None else outcome(result), slot_ms, time.perf_counter_ns() - start)
        return result

    def _count(self, op: str, slot_ms: Optional[int], ns: int) -> None:
        with self._lock:
            if slot_ms is None:
                cell = self.other.setdefault(op, [0, 0])
            else:
                cell = self.by_slot.setdefault((op, slot_ms), [0, 0])
            cell[0] += 1
            cell[1] += ns
            self.total += 1

    def snapshot(self) -> Tuple[int, Dict[str, List[int]], Dict[Tuple[str, int], List[int]]]:
        """Copies of the counters: every call so far, the calls about no slot, the calls per slot."""
        with self._lock:
            other = {op: list(cell) for op, cell in self.other.items()}
            return self.total, other, {key: list(cell) for key, cell in self.by_slot.items()}

    def calls(self, op: str) -> int:
        """How many calls of an operation about no slot returned so far."""
        with self._lock:
            return self.other.get(op, [0, 0])[0]

    # -- counted ---------------------------------------------------------------------

    def _claim(self, request: ClaimRequest) -> Claim:
        reason = request.reason
        sent_ns = time.time_ns()
        answered = _Answered(partial(self.inner._claim, request))
        claim = self._call(f"claim {reason}", request.slot_ms, answered, lambda c: f"claim {reason} -> {c.outcome}")
        if claim.won:
            self.won_sent[(request.job, request.slot_ms)] = sent_ns  # the handler's thread starts next
            self.won_answer[(request.job, request.slot_ms)] = answered.at_ns
        return claim

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """A batch is one store call (one round trip), charged to its slot when all its claims
        are of one slot (claims due at one instant), as ``claim_many <reason>``."""
        reasons = {request.reason for request in requests}
        slots = {request.slot_ms for request in requests}
        name = f"claim_many {reasons.pop() if len(reasons) == 1 else 'mixed'}"
        sent_ns = time.time_ns()
        answered = _Answered(partial(self.inner._claim_many, requests))
        claims = self._call(name, slots.pop() if len(slots) == 1 else None, answered)
        for request, claim in zip(requests, claims):
            if claim.won:
                self.won_sent[(request.job, request.slot_ms)] = sent_ns
                self.won_answer[(request.job, request.slot_ms)] = answered.at_ns
        return claims

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        call = partial(self.inner._heartbeat, job, slot_ms, token, lease_ms)
        return self._call("heartbeat", slot_ms, call, _answered("heartbeat"))

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        call = partial(self.inner._finish, job, slot_ms, token, status, error)
        return self._call(f"finish {status}", slot_ms, call, _answered(f"finish {status}"))

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """A batch of finishes is one store call (one round trip), charged to its slot when all its
        finishes are of one slot, as ``finish_many <status> -> ok`` (every finish accepted) or
        ``-> refused`` (one or more refused); ``mixed`` for more than one status."""
        statuses = {finish.status for finish in finishes}
        slots = {finish.slot_ms for finish in finishes}
        name = f"finish_many {statuses.pop() if len(statuses) == 1 else 'mixed'}"
        call = partial(self.inner._finish_many, finishes)
        return self._call(name, slots.pop() if len(slots) == 1 else None, call, lambda oks: _answered(name)(all(oks)))

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return self._call("release", slot_ms, partial(self.inner._release, job, slot_ms, token), _answered("release"))

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        return self._call("get_run", slot_ms, partial(self.inner._get_run, job, slot_ms))

    def now_ms(self) -> int:
        return self._call("now_ms", None, self.inner.now_ms)

    def _unfinished(self, job: str) -> List[Run]:
        return self._call("unfinished", None, partial(self.inner._unfinished, job))

    def _runs(self, job: str, limit: int) -> List[Run]:
        return self._call("runs", None, partial(self.inner._runs, job, limit))

    def _jobs(self) -> List[str]:
        return self._call("jobs", None, self.inner._jobs)


class _Answered(Generic[T]):
    """A store call that notes when its answer came back (``time.monotonic_ns()``, before any
    counting), so that the time from the answer to the handler is the engine's alone."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self.at_ns = 0

    def __call__(self) -> T:
        result = self._call()
        self.at_ns = time.monotonic_ns()
        return result


def _answered(op: str) -> Callable[[bool], str]:
    """How a heartbeat, finish or release is counted: ``<op> -> ok`` or ``<op> -> refused``."""
    return lambda ok: f"{op} -> {'ok' if ok else 'refused'}"


def tell_parent(ev: str, **fields: Any) -> None:
    """One JSON line on stdout, the instance's side of the conversation."""
    sys.stdout.write(json.dumps({"ev": ev, **fields}) + "\n")
    sys.stdout.flush()


def wait_until_store_ms(clock: StoreClock, due_ms: float, stop: threading.Event) -> bool:
    """Sleep until ``clock`` (a LeaseCron's estimate of the store's clock) reaches ``due_ms``;
    False if ``stop`` was set first."""
    while not stop.is_set():
        left_ms = due_ms - clock.now_ms()
        if left_ms <= 0:
            return True
        stop.wait(min(left_ms / 1000, 0.5))
    return False


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    times = os.times()
    return times.user + times.system


class Recorder:
    """What an instance notes: each handler start, and the events it counts."""

    def __init__(self) -> None:
        #: (job, slot_ms, attempt, reason, time.time_ns(), time.monotonic_ns()) of each handler start
        self.starts: List[Tuple[str, int, int, str, int, int]] = []
        self.events: Counter = Counter()
        self.errors: List[str] = []

    def handler(self, ctx: Context) -> None:
        """The handler of every job: note the time first (the host's monotonic clock, then the wall
        clock), then the run; return at once."""
        mono_ns = time.monotonic_ns()
        wall_ns = time.time_ns()
        self.starts.append((ctx.job, ctx.slot_ms, ctx.attempt, ctx.reason, wall_ns, mono_ns))

    def on_event(self, event: Event) -> None:
        """Count an event by type and reason; keep the text of the first few errors."""
        self.events[f"{event.type} {event.reason}" if event.reason else event.type] += 1
        if event.error and len(self.errors) < 5:
            self.errors.append(f"{event.type} {event.job} {event.slot_ms}: {event.error}")


def register_jobs(cron: LeaseCron, recorder: Recorder, args: argparse.Namespace, first_ms: int) -> int:
    """The phase's jobs, all with the recorder's handler; returns their heartbeat_ms.

    Steady: ``job<i>`` every second. Burst: ``burst<i>`` twice a minute, at
    the seconds of ``first_ms`` (the warm-up) and of the measured slot
    :data:`BURST_WARMUP_S` later, without catch-up (the previous minute's slot
    was due less than ``catch_up_ms`` ago and would be claimed on start).
    """
    if args.phase == STEADY:
        jobs = [cron.add_job(recorder.handler, 1, name=f"job{i}", history_size=args.history) for i in range(args.jobs)]
    else:
        seconds = sorted({(first_ms // 1000) % 60, (first_ms // 1000 + BURST_WARMUP_S) % 60})
        twice = f"* * * * * {','.join(map(str, seconds))}"
        jobs = [cron.add_job(recorder.handler, twice, name=f"burst{i}", catch_up_ms=0) for i in range(args.jobs)]
    return jobs[0].options.heartbeat_ms


def measure_window(
    cron: LeaseCron,
    store: CountingStore,
    wire: CallCounter,
    window: Tuple[int, int],
    stop: threading.Event,
    on_open: Optional[Callable[[], None]] = None,
) -> Dict[str, Any]:
    """CPU seconds, store calls (and client-side round trips) between the window's ends, on the
    store's clock; empty if told to stop before it closed. ``on_open`` is called as it opens."""
    if not wait_until_store_ms(cron.clock, window[0], stop):
        return {}
    if on_open is not None:
        on_open()
    cpu0, mono0, wire0 = cpu_seconds(), time.monotonic(), wire.total()
    total0, other0, _ = store.snapshot()
    if not wait_until_store_ms(cron.clock, window[1], stop):
        return {}
    cpu1, mono1, wire1 = cpu_seconds(), time.monotonic(), wire.total()
    total1, other1, _ = store.snapshot()
    zero = [0, 0]
    return {
        "cpu_s": cpu1 - cpu0,
        "window_s": mono1 - mono0,
        "other": {op: [n - other0.get(op, zero)[0], ns - other0.get(op, zero)[1]] for op, (n, ns) in other1.items()},
        "window_calls": total1 - total0,
        "wire": None if wire0 is None or wire1 is None else [wire1 - wire0, wire.unit],
    }


def write_output(path: str, runner: str, store: CountingStore, recorder: Recorder, measured: Dict[str, Any]) -> None:
    """The instance's JSON lines: a summary, then one line per handler start."""
    _, _, by_slot = store.snapshot()
    with open(path, "w", encoding="utf-8") as out:
        summary = {
            "ev": "instance", "runner": runner, "pid": os.getpid(), **measured,
            "calls": [[op, slot, n, ns] for (op, slot), (n, ns) in by_slot.items()],
            "events": dict(recorder.events), "errors": recorder.errors,
        }  # fmt: skip
        out.write(json.dumps(summary) + "\n")
        for job, slot_ms, attempt, reason, wall_ns, mono_ns in recorder.starts:
            line = {"ev": "start", "job": job, "slot_ms": slot_ms, "attempt": attempt, "reason": reason}
            line.update(wall_ns=wall_ns, claim_sent_ns=store.won_sent.get((job, slot_ms)))
            line.update(mono_ns=mono_ns, answer_mono_ns=store.won_answer.get((job, slot_ms)))
            out.write(json.dumps(line) + "\n")


def instance_main(args: argparse.Namespace) -> int:
    """One instance process: say it is up, get the first slot, register the jobs and start;
    measure the window; on end of stdin (or SIGTERM/SIGINT) stop and write ``--out``."""
    stop = stop_on_signals()
    pipe = ControlPipe(stop)
    profiles = ThreadProfiles(args.profile) if args.profile else None  # before any thread of LeaseCron
    real = open_store(args.store)
    wire = CallCounter(real)  # store_ops.py's count at the client: Redis commands, SQL statements, SQLite BEGINs
    store = CountingStore(real)
    try:
        store.now_ms()  # connect now, not at the first slot
        recorder = Recorder()
        cron = LeaseCron(store, runner=f"i{args.index}", jitter_ms=0, claim_threads=args.claim_threads)
        for event_type in COUNTED_EVENTS:
            cron.on(event_type, recorder.on_event)
        tell_parent("ready", pid=os.getpid())
        control = pipe.first()
        if control is None:
            return 0
        first_ms = int(control["first_slot_ms"])
        heartbeat_ms = register_jobs(cron, recorder, args, first_ms)
        cron.start()
        boot_deadline = time.monotonic() + BOOT_TIMEOUT_S  # its start-up reads each job's unfinished runs
        while store.calls("unfinished") < args.jobs and time.monotonic() < boot_deadline and not stop.is_set():
            time.sleep(0.01)
        tell_parent("booted", store_ms=cron.clock.now_ms(), heartbeat_ms=heartbeat_ms)
        if args.phase == STEADY:
            window = (first_ms - WINDOW_LEAD_MS, first_ms + args.slots * 1000 - WINDOW_LEAD_MS)
        else:  # the measured burst's claims, runs and backups' checks
            burst_ms = first_ms + BURST_WARMUP_S * 1000
            window = (burst_ms - WINDOW_LEAD_MS, burst_ms + 2 * heartbeat_ms + 1000)
        measured = measure_window(cron, store, wire, window, stop, None if profiles is None else profiles.mark)
        stop.wait()
        cron.stop()
        write_output(args.out, cron.runner, store, recorder, measured)
        if profiles is not None:
            profiles.write()
        return 0
    finally:
        store.close()


# ===================================================================================
# The parent: a namespace of its own in the store
# ===================================================================================


@contextmanager
def own_namespace(url: Optional[str], tmp: str, names: List[str]) -> Iterator[Tuple[str, Store, str]]:
    """The URL the instances use, a store of the parent's on it, and a note saying where.

    Makes sure the benchmark's jobs (``names``) write only where nothing was,
    and removes what it wrote on the way out (see the module docstring).
    """
    if url is None:
        url = "sqlite:///" + os.path.join(tmp, "fire_lag.db")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        raise SystemExit("memory:// is one process's store; the instances need a shared one")
    if scheme == "sqlite":
        with sqlite_namespace(url) as found:
            yield found
    elif scheme in ("redis", "rediss", "valkey", "valkeys"):
        with redis_namespace(url, names) as found:
            yield found
    elif scheme in ("postgresql", "postgres"):
        with postgres_namespace(url, names) as found:
            yield found
    else:
        raise SystemExit(f"unknown store URL scheme {scheme!r}: sqlite, redis, rediss, valkey, valkeys or postgresql")


@contextmanager
def sqlite_namespace(url: str) -> Iterator[Tuple[str, Store, str]]:
    """A SQLite file the benchmark creates, deleted (with its WAL files) at the end."""
    path = SQLiteStore.from_url(url).path
    if os.path.exists(path):
        raise SystemExit(f"{path} exists; the benchmark only uses a SQLite file it creates")
    store = open_store(url)
    try:
        yield url, store, f"{path}, created and deleted by the benchmark"
    finally:
        store.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)


@contextmanager
def redis_namespace(url: str, names: List[str]) -> Iterator[Tuple[str, Store, str]]:
    """A key prefix where none of the jobs' keys exist yet; those keys are deleted at the end, with
    the stored schedules of those jobs and the instances' announcements under the prefix (an
    instance still running announces itself again within 10 s)."""
    if "prefix" not in url_options(url):
        url = with_option(url, "prefix", OWN_NAMESPACE.format(pid=os.getpid()))
    store = open_store(url)
    assert isinstance(store, RedisStore)
    keys = [key for name in names for key in job_keys(store.prefix, name)]
    try:
        pipe = store.client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        for name in names:
            pipe.sismember(f"{store.prefix}:jobs", name)
        if any(pipe.execute()):
            raise SystemExit(f"jobs of this benchmark have keys under prefix {store.prefix!r}; not touching them")
    except BaseException:
        store.close()
        raise
    try:
        yield url, store, f"prefix {store.prefix}, its jobs' keys deleted at the end"
    finally:
        try:
            pipe = store.client.pipeline(transaction=False)
            for key in [*keys, *(schedule_key(store.prefix, name) for name in names), *instances_keys(store.prefix)]:
                pipe.delete(key)
            pipe.srem(f"{store.prefix}:jobs", *names)
            pipe.execute()
        finally:
            store.close()


@contextmanager
def postgres_namespace(url: str, names: List[str], name: str = "firelag") -> Iterator[Tuple[str, Store, str]]:
    """A schema of the benchmark's own (dropped at the end), or the jobs' rows in a given one.

    Yields the URL the instances open, the parent's store, and a note saying which.
    """
    with postgres_bench_store(url, name=name, jobs=names) as (store, owned):
        store.now_ms()  # creates the store's tables and functions before the instances start
        what = "created and dropped by the benchmark" if owned else "its jobs' rows deleted at the end"
        instance_url = with_option(url, "schema", store.schema) if "schema" not in url_options(url) else url
        yield instance_url, store, f"schema {store.schema}, {what}"


# ===================================================================================
# The parent: baselines
# ===================================================================================


@dataclasses.dataclass
class Baseline:
    """The store measured alone, before the instances start."""

    bare_ms: float  # the bare round trip, as store_ops.py measures it
    now_ms_ms: float  # a store.now_ms() call, median
    offset_ms: float  # the store's clock minus this host's wall clock
    what: str  # what the bare round trip is


def measure_baseline(store: Store) -> Baseline:
    """The bare round trip (median of rounds), ``now_ms()`` and the store's clock offset."""
    rounds = []
    for _ in range(BARE_ROUNDS):  # a fresh baseline each round, as store_ops.py does (its keys restart at 0)
        with bare_round_trip(store) as bare:
            rounds.append(timed(bare, BARE_OPS).p50)
    bare_us = statistics.median(rounds)
    trips, offset = [], 0.0
    best = math.inf
    for _ in range(CLOCK_READS):
        before_mono, before_wall = time.perf_counter_ns(), time.time_ns()
        store_ms = store.now_ms()
        after_mono, after_wall = time.perf_counter_ns(), time.time_ns()
        trip = after_mono - before_mono
        trips.append(trip / 1e6)
        if trip < best:  # the store's reading lies between before and after: assume the middle
            best = trip
            # now_ms() truncates to the millisecond: on average the true time is 0.5 ms later
            offset = store_ms + 0.5 - (before_wall + after_wall) / 2e6
    if isinstance(store, SQLiteStore):
        offset = 0.0  # the store's clock is this host's wall clock
    what = {
        SQLiteStore: "BEGIN IMMEDIATE + INSERT + COMMIT",
        RedisStore: "EVALSHA of 'return 1'",
        PostgresStore: "SELECT 1 on a connection of the store's pool",
    }.get(type(store), "?")
    return Baseline(bare_us / 1000, statistics.median(trips), offset, what)


# ===================================================================================
# The parent: one phase on M instance processes
# ===================================================================================


@dataclasses.dataclass
class Start:
    """A handler start an instance logged."""

    runner: str
    job: str
    slot_ms: int
    attempt: int
    reason: str
    wall_ns: int  # time.time_ns() as the handler began
    claim_sent_ns: Optional[int]  # time.time_ns() as the claim that won this attempt was sent
    mono_ns: Optional[int] = None  # time.monotonic_ns() as the handler began
    answer_mono_ns: Optional[int] = None  # time.monotonic_ns() as the answer of that claim came back

    @property
    def answer_to_handler_ms(self) -> Optional[float]:
        """From the winning claim's answer to the handler's first line, in ms, on this instance's
        monotonic clock (no clock offset in it); None if either was not noted."""
        if self.mono_ns is None or not self.answer_mono_ns:
            return None
        return (self.mono_ns - self.answer_mono_ns) / 1e6


@dataclasses.dataclass
class InstanceReport:
    """What one instance process measured and logged."""

    runner: str
    pid: int
    booted_ms: int  # on the store's clock, when its jobs' start-up was done
    cpu_s: Optional[float]  # over the window; None if it never closed
    window_s: Optional[float]
    window_calls: Optional[int]  # store calls within the window, whatever slot they were about
    wire: Optional[Tuple[int, str]]  # (count, unit) at the client within the window, as store_ops.py counts
    calls: Dict[Tuple[str, int], Tuple[int, int]]  # (operation, slot_ms) -> (calls, ns)
    other: Dict[str, Tuple[int, int]]  # operation -> (calls, ns) within the window
    events: Dict[str, int]
    errors: List[str]
    starts: List[Start]


@dataclasses.dataclass
class Phase:
    """A finished phase: its jobs, slots, what the instances logged and the store recorded."""

    name: str
    jobs: List[str]
    slots: List[int]
    instances: List[InstanceReport]
    records: Dict[Tuple[str, int], Run]  # the store's runs of the window's (job, slot)s
    warmup: Optional["Phase"] = None  # the burst's warm-up: each job's first slot


class Instances:
    """M instance processes of one phase, with a reader thread on each one's stdout."""

    def __init__(self, count: int, argv: Callable[[int], List[str]], workdir: str, phase: str) -> None:
        self.inbox: "queue.Queue[Tuple[int, Dict[str, Any]]]" = queue.Queue()
        self.logs = [os.path.join(workdir, f"{phase}-i{i}.log") for i in range(count)]
        self.procs: List["subprocess.Popen[str]"] = []
        try:
            for i in range(count):
                with open(self.logs[i], "w") as log:
                    proc = subprocess.Popen(
                        argv(i), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1
                    )
                self.procs.append(proc)
                threading.Thread(target=self._read, args=(i, proc.stdout), daemon=True).start()
        except BaseException:
            self.stop()
            raise

    def _read(self, i: int, stream: Optional[IO[str]]) -> None:
        assert stream is not None
        for line in stream:
            self.inbox.put((i, json.loads(line)))
        self.inbox.put((i, {"ev": "exited"}))

    def wait_all(self, ev: str, timeout_s: float) -> List[Dict[str, Any]]:
        """Each instance's ``ev`` message; RuntimeError if one exits or the time runs out first."""
        got: Dict[int, Dict[str, Any]] = {}
        deadline = time.monotonic() + timeout_s
        while len(got) < len(self.procs):
            try:
                i, message = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                missing = [f"i{i}" for i in range(len(self.procs)) if i not in got]
                raise RuntimeError(f"no {ev!r} from {', '.join(missing)} within {timeout_s:.0f} s") from None
            if message["ev"] == "exited":
                raise RuntimeError(f"instance i{i} exited before {ev!r}: {self.tail(i)}")
            if message["ev"] == ev:
                got[i] = message
        return [got[i] for i in range(len(self.procs))]

    def send(self, message: Dict[str, Any]) -> None:
        """One control line to every instance."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()

    def stop(self) -> None:
        """Close every control pipe (a graceful stop), then SIGTERM and SIGKILL what still runs."""
        for proc in self.procs:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:  # it is gone already
                pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for kill in (None, subprocess.Popen.terminate, subprocess.Popen.kill):
            for proc in self.procs:
                if proc.poll() is None and kill is not None:
                    kill(proc)
            for proc in self.procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if all(proc.poll() is not None for proc in self.procs):
                return
            deadline = time.monotonic() + 5.0

    def tail(self, i: int, lines: int = 15) -> str:
        """The end of instance ``i``'s stderr."""
        try:
            with open(self.logs[i], errors="replace") as log:
                text = log.read().splitlines()[-lines:]
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text) or "(its log is empty)"


def run_phase(
    phase: str, args: argparse.Namespace, url: str, store: Store, workdir: str, profile: Optional[str] = None
) -> Phase:
    """Start the instances, pick the window once all are up, wait past its backups' checks,
    stop them, and collect what they logged and what the store recorded; ``profile``: a directory
    where the instances write their threads' profiles over the window (``--profile``)."""
    jobs_count = args.jobs if phase == STEADY else args.burst
    slots_count = args.slots if phase == STEADY else 1
    history = max(100, slots_count + 60)  # the window's runs must survive pruning until they are read

    def argv(i: int) -> List[str]:
        return [
            sys.executable, os.path.abspath(__file__), "--instance", "--store", url, "--phase", phase,
            "--jobs", str(jobs_count), "--slots", str(slots_count), "--index", str(i),
            "--out", os.path.join(workdir, f"{phase}-i{i}.jsonl"), "--history", str(history),
            "--claim-threads", str(args.claim_threads), *(["--profile", profile] if profile else []),
        ]  # fmt: skip

    instances = Instances(args.instances, argv, workdir, phase)
    try:
        instances.wait_all("ready", READY_TIMEOUT_S)
        # the first slot leaves time for every instance's start-up: a store clock read and one
        # unfinished() read (and, steady, a catch-up claim) per job
        first = math.ceil((store.now_ms() + 1500 + 2 * jobs_count) / 1000) * 1000
        instances.send({"first_slot_ms": first})
        booted = instances.wait_all("booted", BOOT_TIMEOUT_S + (first - store.now_ms()) / 1000)
        measured = first if phase == STEADY else first + BURST_WARMUP_S * 1000
        slots = [measured + k * 1000 for k in range(slots_count)]
        last = slots[-1]
        heartbeat_ms = max(int(b["heartbeat_ms"]) for b in booted)
        # a backup re-checks after 1-2 heartbeats: count those too (and let the burst's window close)
        until = last + 2 * heartbeat_ms + 1000 + WINDOW_LEAD_MS
        while True:
            left_ms = until - store.now_ms()
            if left_ms <= 0:
                break
            time.sleep(min(left_ms / 1000, 1.0))
            for i, proc in enumerate(instances.procs):
                if proc.poll() is not None:
                    raise RuntimeError(f"instance i{i} exited during the phase: {instances.tail(i)}")
    except BaseException:
        instances.stop()
        raise
    instances.stop()
    reports = []
    for i, proc in enumerate(instances.procs):
        if proc.returncode != 0:
            raise RuntimeError(f"instance i{i} exited with {proc.returncode}: {instances.tail(i)}")
        reports.append(read_report(os.path.join(workdir, f"{phase}-i{i}.jsonl"), int(booted[i]["store_ms"])))
    names = [f"job{i}" if phase == STEADY else f"burst{i}" for i in range(jobs_count)]
    records = {(name, run.slot_ms): run for name in names for run in store.runs(name, history)}

    def of(slots: List[int]) -> Dict[Tuple[str, int], Run]:
        return {key: run for key, run in records.items() if key[1] in slots}

    warmup = None if phase == STEADY else Phase("warm-up", names, [first], reports, of([first]))
    return Phase(phase, names, slots, reports, of(slots), warmup)


def read_report(path: str, booted_ms: int) -> InstanceReport:
    """An instance's output file: a summary line, then one line per handler start."""
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    head = lines[0]
    starts = [
        Start(
            head["runner"],
            d["job"],
            d["slot_ms"],
            d["attempt"],
            d["reason"],
            d["wall_ns"],
            d.get("claim_sent_ns"),
            d.get("mono_ns"),
            d.get("answer_mono_ns"),
        )
        for d in lines[1:]
    ]
    return InstanceReport(
        runner=head["runner"],
        pid=head["pid"],
        booted_ms=booted_ms,
        cpu_s=head.get("cpu_s"),
        window_s=head.get("window_s"),
        window_calls=head.get("window_calls"),
        wire=(int(head["wire"][0]), str(head["wire"][1])) if head.get("wire") else None,
        calls={(op, slot): (n, ns) for op, slot, n, ns in head["calls"]},
        other={op: (n, ns) for op, (n, ns) in head.get("other", {}).items()},
        events=head["events"],
        errors=head["errors"],
        starts=starts,
    )


# ===================================================================================
# The parent: figures
# ===================================================================================


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def utc(ms: int) -> str:
    """``HH:MM:SS`` of an epoch-ms time, in UTC."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%H:%M:%S")


@dataclasses.dataclass
class Tally:
    """A phase's handler starts, per (job, slot) of its window."""

    due: List[Tuple[str, int]]  # every (job, slot) of the window
    per_slot: Counter  # (job, slot) -> handler starts logged
    first: Dict[Tuple[str, int], Start]  # (job, slot) -> its earliest handler start

    @property
    def runs(self) -> int:
        """The (job, slot)s whose handler started."""
        return len(self.first)


def tally(phase: Phase) -> Tally:
    """Count the window's handler starts across the instances."""
    window = set(phase.slots)
    starts = [s for inst in phase.instances for s in inst.starts if s.slot_ms in window]
    starts.sort(key=lambda s: s.wall_ns)
    per_slot: Counter = Counter()
    first: Dict[Tuple[str, int], Start] = {}
    for s in starts:
        per_slot[(s.job, s.slot_ms)] += 1
        first.setdefault((s.job, s.slot_ms), s)
    return Tally([(job, slot) for job in phase.jobs for slot in phase.slots], per_slot, first)


def report_phase(phase: Phase, base: Baseline, host: Optional[Dict[str, Any]] = None) -> None:
    """Print one phase's figures; with ``host`` (:func:`host_window`), this host's CPU over the window."""
    m = len(phase.instances)
    if phase.name == STEADY:
        print(
            f"\nsteady: {len(phase.jobs)} jobs every 1 s on {m} instances, {len(phase.slots)} slots"
            f" from {utc(phase.slots[0])} to {utc(phase.slots[-1])} UTC"
        )
    else:
        print(f"\nburst: {len(phase.jobs)} jobs due at {utc(phase.slots[0])} UTC on {m} instances")
        if phase.warmup is not None:
            print_warmup(phase.warmup, base)
    for inst in phase.instances:
        late_ms = inst.booted_ms - (phase.slots[0] - WINDOW_LEAD_MS)
        if late_ms > 0:
            print(f"  note: {inst.runner} finished its start-up {late_ms} ms into the window: it is in the figures")
    counted = tally(phase)
    print_lag(phase, counted, base)
    print_runs_per_slot(phase, counted)
    print_calls(phase, counted, base)
    print_cpu(phase, counted)
    line = None if host is None else host_line(host, instances_cpu(phase))
    if line is not None:
        print(line)
    print_events(phase)


def print_warmup(warmup: Phase, base: Baseline) -> None:
    """One line on the burst's warm-up: each job's first slot, when every instance claims a job
    it never claimed before (on Redis that registers it: one more round trip)."""
    counted = tally(warmup)
    lags = [s.wall_ns / 1e6 + base.offset_ms - s.slot_ms for s in counted.first.values()]
    right = sum(1 for key in counted.due if counted.per_slot[key] == 1)
    last = f"the last handler started {max(lags):.0f} ms after it" if lags else "no handler started"
    print(
        f"  warm-up at {utc(warmup.slots[0])}, each job's first slot (not measured): {last};"
        f" {right} of {len(counted.due)} slots ran once"
    )


#: The lags of :func:`lags`, by key, as :func:`print_lag` labels them.
LAG_ROWS = (
    ("claim_sent", "winning claim sent"),
    ("claim_at_store", "claim reaches the store"),
    ("handler_start", "handler starts"),
    ("handler_after_claim", "  (handler after the claim)"),
    ("answer_to_handler", "  (answer -> handler, one clock)"),
)


def lags(phase: Phase, counted: Tally, base: Baseline) -> Dict[str, List[float]]:
    """The lags of the window's runs in ms (each run's first handler start), by the keys of
    :data:`LAG_ROWS`: after the slot on the store's clock, when the winning claim was sent, reached
    the store (``Run.started_ms``) and the handler started; the handler's start after its claim
    reached the store (store clock vs. host clock plus offset); and the time from the winning claim's
    answer (as the instance's store wrapper got it back) to the handler's first line, both on the
    instance's monotonic clock: the engine's dispatch alone, no clock offset in it."""

    def on_store_clock(wall_ns: int) -> float:
        return wall_ns / 1e6 + base.offset_ms

    firsts = counted.first.values()
    answered = [s.answer_to_handler_ms for s in firsts]
    return {
        "claim_sent": [on_store_clock(s.claim_sent_ns) - s.slot_ms for s in firsts if s.claim_sent_ns],
        "claim_at_store": [run.started_ms - slot for (job, slot), run in phase.records.items() if run.attempt == 1],
        "handler_start": [on_store_clock(s.wall_ns) - s.slot_ms for s in firsts],
        "handler_after_claim": [
            on_store_clock(s.wall_ns) - phase.records[key].started_ms
            for key, s in counted.first.items()
            if key in phase.records and phase.records[key].attempt == s.attempt
        ],
        "answer_to_handler": [ms for ms in answered if ms is not None],
    }


def print_lag(phase: Phase, counted: Tally, base: Baseline) -> None:
    """Lag after the slot, on the store's clock: p50, p99, max, and in bare round trips."""
    found = lags(phase, counted, base)
    started = found["handler_start"]
    print(
        f"  {'lag after the slot, ms':<32} {'p50':>8} {'p99':>8} {'max':>8}   {'x bare: p50':>11} {'p99':>7} {'max':>7}"
    )
    for key, label in LAG_ROWS:
        values = found[key]
        if not values:
            print(f"  {label:<32} (none)")
            continue
        figures = (percentile(values, 50), percentile(values, 99), max(values))
        line = f"  {label:<32} " + " ".join(f"{v:8.1f}" for v in figures) + "   "
        line += " ".join(f"{v / base.bare_ms:{w}.0f}" for v, w in zip(figures, (11, 7, 7)))
        if label == "handler starts" and phase.name == STEADY:
            met = "met" if figures[1] < TARGET_P99_MS else "MISSED"
            setup = (len(phase.jobs), len(phase.instances))
            jobs, instances = TARGET_SETUP
            aside = "" if setup == TARGET_SETUP else f" (stated for {jobs} jobs x {instances} instances)"
            line += f"   target p99 < {TARGET_P99_MS:.0f} ms: {met}{aside}"
        print(line)
    if phase.name == BURST and started:
        print(f"  the last of the {len(phase.jobs)} handlers started {max(started):.0f} ms after the slot")


def print_runs_per_slot(phase: Phase, counted: Tally) -> None:
    """Handler starts per (job, slot), what the store recorded, and who ran them."""
    per_slot, due = counted.per_slot, counted.due
    once = sum(1 for key in due if per_slot[key] == 1)
    never = sum(1 for key in due if per_slot[key] == 0)
    more = sum(1 for key in due if per_slot[key] > 1)
    met = "met" if once == len(due) else "MISSED"
    print(
        f"  runs per slot (the instances' handler starts), {len(due)} slots due:"
        f" 1 run: {once}, none: {never}, more: {more}   target exactly 1: {met}"
    )
    kinds: Counter = Counter()
    odd: List[str] = []
    for key in due:
        run = phase.records.get(key)
        if run is not None and run.status == "success" and run.attempt == 1 and not run.handed_over:
            kinds["success at attempt 1"] += 1
            continue
        what = "no record" if run is None else f"{run.status} at attempt {run.attempt}"
        what += " (handed over)" if run is not None and run.handed_over else ""
        kinds[what] += 1
        if len(odd) < 5:
            odd.append(f"{key[0]} @ {utc(key[1])}: {what}, {per_slot[key]} handler start(s)")
    print("  the store's records of those slots: " + ", ".join(f"{k}: {n}" for k, n in kinds.most_common()))
    for line in odd:
        print(f"    {line}")
    wins = Counter(s.runner for s in counted.first.values())
    print("  runs per instance: " + ", ".join(f"{inst.runner} {wins[inst.runner]}" for inst in phase.instances))


def call_counts(phase: Phase) -> Dict[str, List[int]]:
    """Store calls by operation, all instances: those about the window's slots and the others made
    while the window was open: [calls, ns]."""
    window = set(phase.slots)
    calls: Dict[str, List[int]] = {}
    for inst in phase.instances:
        found = [(op, n, ns) for (op, slot), (n, ns) in inst.calls.items() if slot in window]
        found += [(op, n, ns) for op, (n, ns) in inst.other.items() if n]
        for op, n, ns in found:
            cell = calls.setdefault(op, [0, 0])
            cell[0] += n
            cell[1] += ns
    return calls


def print_calls(phase: Phase, counted: Tally, base: Baseline) -> None:
    """Store calls per run by operation (those about the window's slots, and the others made
    while the window was open), and the round trips counted at the client."""
    calls = call_counts(phase)
    if not counted.runs:
        return
    print(f"  store calls per run, all instances ({counted.runs} runs):")
    print(f"    {'operation':<34} {'calls':>7} {'per run':>8} {'mean ms':>8} {'x bare':>7}")
    for op, (n, ns) in sorted(calls.items(), key=lambda item: (not item[0].startswith("claim"), -item[1][0])):
        mean_ms = ns / n / 1e6
        print(f"    {op:<34} {n:7d} {n / counted.runs:8.2f} {mean_ms:8.2f} {mean_ms / base.bare_ms:7.1f}")
    total = sum(n for n, _ in calls.values())
    print(f"    {'total':<34} {total:7d} {total / counted.runs:8.2f}")
    if base.what.startswith("BEGIN"):
        print("    (on SQLite now_ms reads the host's clock: no round trip)")
    wires = [(inst.wire, inst.window_calls) for inst in phase.instances]
    if all(wire is not None and made for wire, made in wires):
        sent = sum(wire[0] for wire, _ in wires if wire is not None)
        made = sum(made for _, made in wires if made)
        unit = next(wire[1] for wire, _ in wires if wire is not None)
        print(f"  counted at the client over the window: {sent} {unit} for {made} store calls ({sent / made:.2f} each)")


def print_cpu(phase: Phase, counted: Tally) -> None:
    """Each instance's CPU over the window, and all instances' CPU per run."""
    cpu = [(inst.runner, inst.cpu_s, inst.window_s) for inst in phase.instances]
    measured = [(runner, c, w) for runner, c, w in cpu if c is not None and w]
    if len(measured) < len(cpu):
        print("  CPU: the window did not close in every instance (stopped early)")
        return
    window_s = statistics.mean(w for _, _, w in measured)
    parts = [f"{runner} {c:.2f} s ({100 * c / w:.1f} %)" for runner, c, w in measured]
    total = sum(c for _, c, _ in measured)
    per_run = f", {1000 * total / counted.runs:.2f} ms CPU per run" if counted.runs else ""
    print(f"  CPU over the window ({window_s:.1f} s, % of one core): " + ", ".join(parts) + per_run)


def instances_cpu(phase: Phase) -> Optional[float]:
    """All instances' CPU seconds over the window; None if it did not close in every instance."""
    cpu = [inst.cpu_s for inst in phase.instances]
    return None if any(c is None for c in cpu) else sum(c for c in cpu if c is not None)


def host_window(sampler: HostSampler, phase: Phase, base: Baseline, load_before: Sequence[float]) -> Dict[str, Any]:
    """This host's CPU over the phase's window (:meth:`HostSampler.window`): from
    :data:`WINDOW_LEAD_MS` before its first slot, for as long as the instances measured their CPU."""
    opens_s = WINDOW_LEAD_MS / 1000
    start_s = (phase.slots[0] - base.offset_ms) / 1000 - opens_s
    spans = [inst.window_s for inst in phase.instances if inst.window_s]
    span_s = statistics.mean(spans) if spans else opens_s + len(phase.slots)
    return sampler.window(start_s, span_s, load_before)


def headline(phase: Phase, base: Baseline, host: Dict[str, Any]) -> Dict[str, Optional[float]]:
    """The phase's headline figures, as ``--repeat`` sums them up (``speedlib.repeats``): the handler's
    start after the slot, after its claim and after the claim's answer, the slots run exactly once,
    store calls and CPU per run, and this host's state over the window."""
    counted = tally(phase)
    found = lags(phase, counted, base)
    figures: Dict[str, Optional[float]] = {}
    for key, what, qs in (("handler_start", "handler starts", (50, 99, 100)),
                          ("handler_after_claim", "handler after the claim", (50, 99)),
                          ("answer_to_handler", "answer -> handler", (50, 99))):  # fmt: skip
        for q in qs:
            name = "max" if q == 100 else f"p{q}"
            figures[f"{what} {name}, ms"] = percentile(found[key], q) if found[key] else None
    due = counted.due
    figures["slots run exactly once, %"] = 100 * sum(1 for key in due if counted.per_slot[key] == 1) / len(due)
    runs = counted.runs
    calls = sum(n for n, _ in call_counts(phase).values())
    cpu = instances_cpu(phase)
    figures["store calls per run"] = calls / runs if runs else None
    figures["CPU per run, ms"] = 1000 * cpu / runs if runs and cpu is not None else None
    cores = shares(host, cpu) or {}
    figures["busy cores, this host"] = host.get("busy_cores")
    figures["busy cores, everything else"] = cores.get("else")
    figures["load average (1 min) at the end"] = (host.get("load_after") or [None])[0]
    return figures


def print_events(phase: Phase) -> None:
    """The events the instances counted over the whole phase, and the first errors' text."""
    events: Counter = Counter()
    for inst in phase.instances:
        events.update(inst.events)
    if not events:
        print(f"  events over the whole phase: no {', '.join(COUNTED_EVENTS)}")
        return
    print("  events over the whole phase: " + ", ".join(f"{k} {n}" for k, n in sorted(events.items())))
    for inst in phase.instances:
        for error in inst.errors[:2]:
            print(f"    {inst.runner}: {error[:200]}")


# ===================================================================================
# main
# ===================================================================================


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line; ``--instance`` and the options after it are for the instance processes."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    p.add_argument("--instances", type=int, default=3, help="instance processes (default 3)")
    p.add_argument("--jobs", type=int, default=100, help="jobs on a 1 s interval (default 100)")
    p.add_argument("--slots", type=int, default=20, help="slots in the measured window (default 20)")
    p.add_argument("--burst", type=int, default=1000, help="jobs due in the same second (default 1000; 0: no burst)")
    p.add_argument("--claim-threads", type=int, default=4, help="LeaseCron(claim_threads=...) (default 4)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure N times, fresh instances each time on the same store, and print each figure's"
                        " median and range (default 1)")  # fmt: skip
    hidden = argparse.SUPPRESS
    p.add_argument("--profile", metavar="DIR",
                   help="profile the instances' threads over each phase's window and print where their CPU went;"
                        " the files go to DIR/<phase>/ (DIR/<phase>/<run>/ with --repeat). It slows them down:"
                        " not a run to read the lags from")  # fmt: skip
    p.add_argument("--instance", action="store_true", help=hidden)
    p.add_argument("--phase", choices=(STEADY, BURST), help=hidden)
    p.add_argument("--index", type=int, default=0, help=hidden)
    p.add_argument("--out", help=hidden)
    p.add_argument("--history", type=int, default=100, help=hidden)
    args = p.parse_args(argv)
    for name in ("instances", "jobs", "slots"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.burst < 0 or args.claim_threads < 1 or args.repeat < 1:
        p.error("--burst must be at least 0, --claim-threads and --repeat at least 1")
    return args


def print_header(args: argparse.Namespace, store: Store, note: str, base: Baseline) -> None:
    """What was measured where, the machine's state, and the baselines."""
    print(f"leasecron {leasecron.__version__}, store {store.kind}: {store.server_version()}, {note}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    print(
        f"{args.instances} instance processes, jitter_ms=0, claim_threads={args.claim_threads};"
        f" Python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load}, niceness {niceness}"
    )
    print("baseline, before the instances start:")
    rounds = f"p50, median of {BARE_ROUNDS} rounds of {BARE_OPS}, as store_ops.py"
    print(f"  bare round trip     {base.bare_ms:7.3f} ms  ({base.what}; {rounds})")
    print(f"  store.now_ms()      {base.now_ms_ms:7.3f} ms  (median of {CLOCK_READS})")
    clock = "this host's clock" if isinstance(store, SQLiteStore) else "from the quickest reading"
    print(f"  store clock - host  {base.offset_ms:+7.1f} ms  ({clock}; added to the handlers' wall times)")


def main() -> int:
    """The benchmark (or, with ``--instance``, one instance process); 1 if an instance failed."""
    args = parse_args()
    if args.instance:
        return instance_main(args)
    exit_on_sigterm()
    names = [f"job{i}" for i in range(args.jobs)] + [f"burst{i}" for i in range(args.burst)]
    with tempfile.TemporaryDirectory(prefix="fire_lag-") as tmp:
        with own_namespace(args.store, tmp, names) as (url, store, note):
            base = measure_baseline(store)
            print_header(args, store, note, base)
            sys.stdout.flush()
            phases = [STEADY] + ([BURST] if args.burst else [])
            runs: Dict[str, List[Dict[str, Optional[float]]]] = {phase: [] for phase in phases}
            for k in range(args.repeat):
                if args.repeat > 1:
                    print(f"\n=== run {k + 1} of {args.repeat}")
                for phase in phases:
                    try:
                        runs[phase].append(measure_phase(phase, args, url, store, tmp, base, k))
                    except RuntimeError as exc:  # an instance failed: say how (the store is cleaned up all the same)
                        print(f"fire_lag: the {phase} phase failed: {exc}", file=sys.stderr)
                        return 1
                    sys.stdout.flush()
            if args.repeat > 1:
                for phase in phases:
                    print_repeats(phase, runs[phase])
    return 0


def measure_phase(
    phase: str, args: argparse.Namespace, url: str, store: Store, tmp: str, base: Baseline, k: int
) -> Dict[str, Optional[float]]:
    """The ``k``-th run of one phase on fresh instances, this host's CPU sampled meanwhile (and with
    ``--profile`` the instances' threads): its report, and its headline figures."""
    profile = None
    if args.profile:
        profile = os.path.join(os.path.abspath(args.profile), phase, *([str(k + 1)] if args.repeat > 1 else []))
        os.makedirs(profile, exist_ok=True)
    load_before = os.getloadavg()
    sampler = HostSampler(*server_cpu_of(store))
    try:
        done = run_phase(phase, args, url, store, tmp, profile)
    finally:
        sampler.stop()
    host = host_window(sampler, done, base, load_before)
    report_phase(done, base, host)
    if profile is not None:
        print_profiles(profile, what=f"the instances' threads over the {phase} window")
    return headline(done, base, host)


if __name__ == "__main__":
    sys.exit(main())
