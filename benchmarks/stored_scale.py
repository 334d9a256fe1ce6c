"""Schedules as data at scale: N stored jobs, their puts, an instance's start, its memory and the poll.

    python benchmarks/stored_scale.py [--store sqlite|URL] [--jobs 100000] [--put-job 5000] [--threads 8]
                                      [--poll-rounds 200] [--profile]

What it measures (issue 28, "Scale and speed"), on a store of its own
(``speedlib.namespaces``: a new SQLite file, a Redis key prefix, a PostgreSQL
schema, removed at the end), with N = ``--jobs`` stored jobs of one task,
each on a cron schedule (UTC) none of which falls due during the run
(``scale.not_due_schedules``):

1. **Puts.** The first ``--put-job`` jobs are stored one after the other
   with ``LeaseCron.put_job`` (every check of the spec, then one
   ``Store.set_schedule``), on an instance that was never started; the
   others through the public ``Store.set_schedule`` itself, from
   ``--threads`` threads (1 on SQLite: one writer at a time in any case).
   Shown: each path's rate, and the time N puts take at that rate.
2. **An instance's start**, in a fresh process of its own (this file with
   ``--child``): a ``LeaseCron`` on the store's URL with the task registered
   (``cron.task``), started; the times from ``start()`` to

   * *loaded*: the start-up's ``schedule_changes(0)`` returned (every stored
     schedule read, one call);
   * *planned*: every stored job's next slot has its entry in the scheduler's
     heap. The benchmark counts the entries of ``Slots._fire`` pushed per job
     name, from the outside (``scale.CountingScheduler``, installed as the
     engine's ``Scheduler``): this is the target's "all scheduled" (< 10 s);
   * *recovered*: every job's start-up recovery read its unfinished runs (one
     ``unfinished`` call per job, from the claim pool), as ``scale.py``'s
     boot counts it: what a stored job's catch-up needs before it can run.

   Then, 2 s later, its memory: ``VmRSS`` against the baseline's (the same
   process on a store of its own with no stored job, started first), per
   stored job, and the peak (``VmHWM``). ``--profile`` runs the child's
   threads under cProfile (``burstlib.instance.ThreadProfiles``) and prints
   where each kind of thread spent its CPU from ``start()`` on (the times
   are then not the benchmark's: profiling slows every call).
3. **The poll after a change.** ``Store.poll(cursor)`` (requests and schedule
   changes in one call: what each instance sends every ``poll_ms``), timed in
   the benchmark's process against the store with N stored jobs: in each of
   ``--poll-rounds`` rounds one job is changed (``set_schedule``, untimed),
   then the poll from the cursor before the change (it brings that one
   change) and the poll from the cursor after it (nothing new) are timed, in
   alternating order. Shown: the p50 of each, their ratio (target: 1 within
   noise), and the same no-change poll on the empty baseline store (N's
   weight on it). On PostgreSQL the polls are timed again after ``VACUUM
   ANALYZE`` of the stores' tables, as autovacuum would leave them (its
   setting is printed): before, the planner has no statistics of the
   100,000 rows just written.

Printed, never asserted. A quick look::

    python benchmarks/stored_scale.py --jobs 2000 --put-job 200 --poll-rounds 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import leasecron.engine.core
from leasecron import LeaseCron, Store, open_store
from leasecron.engine.slots import Slots
from scale import (
    CountingScheduler,
    count_unfinished,
    exit_when_parent_goes,
    json_from_child,
    not_due_schedules,
    proc_status,
)
from speedlib.namespaces import kind_of, own_store
from speedlib.pg_schema import pg_execute
from speedlib.poll import vacuum
from speedlib.sigterm import exit_on_sigterm
from speedlib.urls import replace_option

#: The task every stored job runs.
TASK = "stored_scale.idle"
#: The start-up target of the issue: every stored job scheduled within this, in s.
BOOT_TARGET_S = 10.0
#: How long a child may take to load, plan and recover every job, in s.
BOOT_TIMEOUT_S = 900.0
#: How long after the last recovery the memory is read, in s.
SETTLE_S = 2.0
#: The schedules stay clear of this many seconds after the puts begin (the whole run).
HORIZON_S = 3600.0

Result = Dict[str, Any]


def idle_task() -> None:
    """The stored jobs' task (never due during the run)."""


def job_name(i: int) -> str:
    """The name of stored job ``i``."""
    return f"stored-{i:06d}"


# ---------------------------------------------------------------------------------------------
# The instance's start (the child process)
# ---------------------------------------------------------------------------------------------


class PlanningScheduler(CountingScheduler):
    """:class:`scale.CountingScheduler` that also notes each job whose next slot was pushed
    (an entry of ``Slots._fire``, the job its first argument), and when the count reached
    :attr:`wanted`."""

    wanted = 0

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.planned: Set[str] = set()
        self.all_planned_at: Optional[float] = None

    def _push(self, heap: List[Any], due: float, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        if getattr(fn, "__func__", None) is Slots._fire:
            self.planned.add(args[0].name)  # a set's add is atomic; a late count only delays the time
            if self.all_planned_at is None and len(self.planned) >= self.wanted:
                self.all_planned_at = time.perf_counter()
        super()._push(heap, due, fn, args)


def timed_first_call(store: Store, name: str) -> List[float]:
    """Note when ``store.<name>`` first returned (``time.perf_counter()``), in the list returned."""
    original = getattr(store, name)
    returned: List[float] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not returned:
            returned.append(time.perf_counter())
        return result

    setattr(store, name, call)
    return returned


def wait_for(condition: Callable[[], bool], what: str, deadline: float) -> float:
    """Wait until ``condition()``; the ``time.perf_counter()`` then. SystemExit past ``deadline``."""
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"start-up not done after {BOOT_TIMEOUT_S:g} s: waiting for {what}")
        time.sleep(0.005)
    return time.perf_counter()


def run_child(url: str, n: int, profile_dir: Optional[str]) -> Result:
    """Start an instance with the task on ``url`` (``n`` stored jobs); its times and memory."""
    before = proc_status()
    store = open_store(url)
    loaded = timed_first_call(store, "schedule_changes")
    recovered = count_unfinished(store)
    cron = LeaseCron(store, runner=f"stored-scale-{n}")
    cron.task(name=TASK)(idle_task)
    ready = proc_status()
    profiles = None
    if profile_dir is not None:
        from burstlib.instance import ThreadProfiles

        profiles = ThreadProfiles(profile_dir)
    PlanningScheduler.wanted = n
    original = leasecron.engine.core.Scheduler
    leasecron.engine.core.Scheduler = PlanningScheduler  # type: ignore[misc]
    try:
        t0 = time.perf_counter()
        cron.start()
        started = time.perf_counter()
    finally:
        leasecron.engine.core.Scheduler = original  # type: ignore[misc]
    scheduler = CountingScheduler.latest
    assert isinstance(scheduler, PlanningScheduler), "the engine did not build the planning scheduler"
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    loaded_at = wait_for(lambda: bool(loaded), "schedule_changes(0)", deadline)
    planned_at = wait_for(lambda: len(scheduler.planned) >= n, f"{n} planned slots", deadline)
    recovered_at = wait_for(lambda: recovered() >= n, f"{n} recoveries", deadline)
    if profiles is not None:
        profiles.write()
    time.sleep(SETTLE_S)
    after = proc_status()
    entries = scheduler.entries()
    jobs_here = len(scheduler.planned)
    cron.stop()
    store.close()
    return {
        "jobs": n, "start_s": started - t0, "loaded_s": loaded_at - t0,
        "planned_s": (scheduler.all_planned_at or planned_at) - t0, "recovered_s": recovered_at - t0,
        "rss_start_kib": before["VmRSS"], "rss_ready_kib": ready["VmRSS"], "rss_kib": after["VmRSS"],
        "hwm_kib": after["VmHWM"], "timer_entries": entries, "jobs_planned": jobs_here,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The parent: puts, a child per start, the polls
# ---------------------------------------------------------------------------------------------


def url_of(spec: str, store: Store, tmp: str, name: str) -> str:
    """The URL of the store ``speedlib.namespaces.own_store(spec, name, tmp)`` made."""
    kind = kind_of(spec)
    if kind == "sqlite":
        return f"sqlite:///{os.path.join(tmp, f'{name}.db')}"
    if kind == "redis":
        return replace_option(spec, "prefix", store.prefix)  # type: ignore[attr-defined]
    if kind == "postgresql":
        return replace_option(spec, "schema", store.schema)  # type: ignore[attr-defined]
    raise SystemExit("--store memory is one process's store: give sqlite or a server's URL")


def put_jobs(store: Store, n: int, put_job_n: int, threads: int) -> Result:
    """Store ``n`` jobs: the first ``put_job_n`` with ``put_job``, the rest with ``set_schedule``."""
    schedules = not_due_schedules(n, HORIZON_S)
    cron = LeaseCron(store, runner="stored-scale-put")
    cron.task(name=TASK)(idle_task)
    first = min(put_job_n, n)
    t0 = time.perf_counter()
    for i in range(first):
        cron.put_job(job_name(i), task=TASK, schedule=schedules[i])
    put_job_s = time.perf_counter() - t0

    def put(i: int) -> None:
        store.set_schedule(job_name(i), by="stored-scale-put", schedule=schedules[i], task=TASK)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(put, range(first, n), chunksize=256):
            pass
    bulk_s = time.perf_counter() - t0
    return {"put_job_n": first, "put_job_s": put_job_s, "bulk_n": n - first, "bulk_s": bulk_s, "threads": threads}


def time_poll(store: Store, cursor: int) -> Tuple[float, int]:
    """One ``poll(cursor)``: its time in µs and the changes it brought."""
    t0 = time.perf_counter()
    polled = store.poll(cursor)
    return (time.perf_counter() - t0) * 1e6, len(polled.schedules.changes)


def poll_figures(store: Store, base: Store, n: int, rounds: int) -> Result:
    """The poll after one change against the poll with no change (and on the empty store)."""
    schedules = not_due_schedules(n, HORIZON_S)
    one: List[float] = []
    none: List[float] = []
    empty: List[float] = []
    base_cursor = base.poll(0).schedules.cursor
    cursor = store.poll(0).schedules.cursor
    for r in range(rounds + 1):  # the first round warms up
        i = r % n
        old = cursor
        store.set_schedule(job_name(i), by="stored-scale-poll", schedule=schedules[(i + r) % n], task=TASK)
        cursor = store.poll(old).schedules.cursor  # untimed: the cursor after the change
        order = [("one", old), ("none", cursor)]
        for what, after in order if r % 2 else order[::-1]:
            us, brought = time_poll(store, after)
            if brought != (what == "one"):
                raise SystemExit(f"poll({after}) brought {brought} change(s), not {int(what == 'one')}")
            if r:
                (one if what == "one" else none).append(us)
        us, _ = time_poll(base, base_cursor)
        if r:
            empty.append(us)
    p50 = statistics.median
    return {"rounds": rounds, "one_us": p50(one), "none_us": p50(none), "empty_us": p50(empty)}


def measure_child(url: str, n: int, profile_dir: Optional[str]) -> Result:
    """Run :func:`run_child` in a fresh process (killed on any exit); its figures."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", url, "--jobs", str(n)]
    if profile_dir:
        cmd += ["--profile-dir", profile_dir]
    return json_from_child(cmd, BOOT_TIMEOUT_S + 120, f"the instance with {n} stored jobs")


def report(n: int, puts: Result, base: Result, boot: Result, polls: List[Tuple[str, Result]]) -> None:
    """The figures, and the targets (printed, never asserted)."""

    def rate(count: int, seconds: float) -> str:
        return f"{count / seconds:,.0f}/s" if count and seconds > 0 else "-"

    per_put_job = puts["put_job_s"] / puts["put_job_n"] if puts["put_job_n"] else None
    per_bulk = puts["bulk_s"] / puts["bulk_n"] if puts["bulk_n"] else None
    put_job_rate = rate(puts["put_job_n"], puts["put_job_s"])
    print(f"puts: put_job {puts['put_job_n']:,} jobs in {puts['put_job_s']:.2f} s ({put_job_rate}"
          + (f", {n:,} would take {per_put_job * n:.1f} s" if per_put_job else "") + ");"
          f" set_schedule from {puts['threads']} thread(s) {puts['bulk_n']:,} jobs in {puts['bulk_s']:.2f} s"
          f" ({rate(puts['bulk_n'], puts['bulk_s'])}" + (f", {n:,} would take {per_bulk * n:.1f} s" if per_bulk else "")
          + ")")  # fmt: skip
    print()
    print(f"{'stored jobs':>11} {'start() s':>9} {'loaded s':>8} {'planned s':>9} {'recovered s':>11}"
          f" {'RSS MiB':>8} {'+RSS MiB':>8} {'KiB/job':>8} {'peak MiB':>8} {'timers':>7}")  # fmt: skip
    for label, r in (("0 (base)", base), (f"{n:,}", boot)):
        extra = r["rss_kib"] - base["rss_kib"]
        per_job = f"{extra / r['jobs']:.2f}" if r["jobs"] else "-"
        print(f"{label:>11} {r['start_s']:9.3f} {r['loaded_s']:8.3f} {r['planned_s']:9.3f} {r['recovered_s']:11.3f}"
              f" {r['rss_kib'] / 1024:8.1f} {extra / 1024:8.1f} {per_job:>8} {r['hwm_kib'] / 1024:8.1f}"
              f" {r['timer_entries']:>7}")  # fmt: skip
    print("from start(): loaded: schedule_changes(0) returned; planned: every stored job's next slot in the")
    print("scheduler's heap; recovered: every job's unfinished() read; RSS 2 s later, +RSS over the baseline's")
    print("(no stored job), per stored job; peak: VmHWM; timers: the heap's entries")
    print()
    ratios = []
    for state, poll in polls:
        ratio = poll["one_us"] / poll["none_us"] if poll["none_us"] else float("nan")
        ratios.append(f"x {ratio:.2f} {state}")
        print(f"poll p50 over {poll['rounds']} rounds, {state}: after one change {poll['one_us']:.1f} us, no change"
              f" {poll['none_us']:.1f} us (x {ratio:.2f}); no change on the empty store {poll['empty_us']:.1f} us"
              f" (N's weight: x {poll['none_us'] / poll['empty_us']:.2f})")  # fmt: skip
    print()
    verdict = "met" if boot["planned_s"] < BOOT_TARGET_S else "MISSED"
    print(f"target: {n:,} stored jobs scheduled < {BOOT_TARGET_S:g} s after start(): {verdict}"
          f" ({boot['planned_s']:.2f} s)")  # fmt: skip
    print(f"target: a poll after one change costs what a poll with no change does: {', '.join(ratios)} (1 within"
          " noise)")  # fmt: skip


def parse_args() -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--store", default="sqlite", help="sqlite (a temporary file) or a Redis, Valkey or PostgreSQL URL")
    p.add_argument("--jobs", type=int, default=100_000, help="stored jobs (default 100000)")
    p.add_argument("--put-job", type=int, default=5_000, help="of which stored with put_job (default 5000)")
    p.add_argument("--threads", type=int, help="threads of the set_schedule puts (default 8; 1 on SQLite)")
    p.add_argument("--poll-rounds", type=int, default=200, help="rounds of the poll's timing (default 200)")
    p.add_argument("--profile", action="store_true", help="profile the start-up's threads (slows it down)")
    p.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)  # the instance's process
    p.add_argument("--profile-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    threads_ok = args.threads is None or args.threads >= 1
    if args.jobs < (0 if args.child else 1) or args.put_job < 0 or args.poll_rounds < 1 or not threads_ok:
        p.error("--jobs and --poll-rounds must be at least 1, --put-job at least 0, --threads at least 1")
    return args


def main() -> int:
    """Parse the arguments; measure (or, with ``--child``, start one instance)."""
    args = parse_args()
    if args.child:
        exit_when_parent_goes()
        sys.stdout.write(json.dumps(run_child(args.child, args.jobs, args.profile_dir)) + "\n")
        sys.stdout.flush()
        return 0
    exit_on_sigterm()
    kind = kind_of(args.store)
    threads = args.threads or (1 if kind == "sqlite" else 8)
    n = args.jobs
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="leasecron-stored-scale-") as tmp:
        with own_store(args.store, "stored_scale_base", tmp) as (base_store, base_where), \
                own_store(args.store, "stored_scale", tmp) as (store, where):  # fmt: skip
            base_url = url_of(args.store, base_store, tmp, "stored_scale_base")
            url = url_of(args.store, store, tmp, "stored_scale")
            print(f"leasecron {leasecron.__version__}, {store.server_version()}, Python {sys.version.split()[0]},"
                  f" {os.cpu_count()} CPUs; {n:,} stored jobs of one task in {where}; the baseline's store:"
                  f" {base_where}")  # fmt: skip
            sys.stdout.flush()
            base = measure_child(base_url, 0, None)
            puts = put_jobs(store, n, args.put_job, threads)
            profile_dir = os.path.join(tmp, "profiles") if args.profile else None
            if profile_dir:
                os.makedirs(profile_dir)
            boot = measure_child(url, n, profile_dir)
            polls = [("as stored", poll_figures(store, base_store, n, args.poll_rounds))]
            if kind == "postgresql":  # the planner's statistics: as autovacuum (if on) would leave them
                for each in (store, base_store):
                    vacuum(each)
                polls.append(("after VACUUM ANALYZE", poll_figures(store, base_store, n, args.poll_rounds)))
                autovacuum = pg_execute(store, "SHOW autovacuum")[0][0]  # type: ignore[arg-type]
                print(f"(PostgreSQL: autovacuum {autovacuum})")
            report(n, puts, base, boot, polls)
            if profile_dir:
                from burstlib.profiles import print_profiles

                print()
                print_profiles(profile_dir, what="the instance's threads from start() until every job was recovered")
    print(f"({time.monotonic() - began:.0f} s in all)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
