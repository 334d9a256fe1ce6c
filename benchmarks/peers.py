"""leasecron beside its peers: runs per slot and fire lag beside APScheduler 3 and 4, recovery after a SIGKILL
beside APScheduler 4 and celery beat with RedBeat.

    python benchmarks/peers.py [--slots 30] [--instances 3] [--pg URL] [--redis URL] [--lease S]
                               [--recovery-deadline 90] [--no-recovery] [--venv-dir DIR] [--json PATH]

Two measurements, one after the other. In each, every system runs at the
same time, on this machine, each on ``--instances`` OS processes (default 3)
of its own, and each beside leasecron on the same store.

The table: runs per slot and fire lag
=====================================

Six systems, each process holding the same one job that fires every second:

1. **leasecron on SQLite**: a temporary SQLite file; each process is
   ``fire_lag.py``'s instance (``LeaseCron(store, runner="i<n>",
   jitter_ms=0)``, the library's other defaults, the job added as
   ``cron.add_job(handler, 1, name="job0")``: 1 s, an interval aligned to the
   Unix epoch);
2. **APScheduler 3 on SQLite**: in each process a ``BackgroundScheduler(
   jobstores={"default": SQLAlchemyJobStore(url="sqlite:///<the same file>",
   tablename="aps_bench_<random>")}, timezone=UTC)`` and, as every process of
   a service does on start, ``scheduler.add_job(tick, "cron", second="*",
   id="tick", replace_existing=True)`` (a cron trigger on every whole second,
   which fires on the same whole seconds as leasecron's interval; an
   ``"interval"`` trigger would start from the moment it was added); the
   scheduler's defaults otherwise (``misfire_grace_time=1``, ``coalesce=True``,
   ``max_instances=1``);
3. **APScheduler 4 on SQLite** (4.0.0a6, the newest release, a pre-release):
   in each process a ``Scheduler(SQLAlchemyDataStore("sqlite:///<the same
   file>"), RedisEventBroker(<--redis>, channel=<the run's own>))`` with the
   library's defaults otherwise (``lease_duration`` 30 s; the task's
   ``max_running_jobs=1``, ``misfire_grace_time=None``) and, on start,
   ``scheduler.add_schedule(tick, CronTrigger(second="*", start_time=<the
   first slot>, timezone=UTC), id="tick")`` (the default ``conflict_policy``:
   the first process adds it, the others find it). APScheduler 4 needs an
   event broker shared by all schedulers as soon as several share a data
   store (it wakes them to acquire new jobs); SQLite has none, so the local
   Redis serves. ``start_time``: 4.0.0a6's ``CronTrigger`` keeps the
   sub-second part of its start time (default: now), so without it the job
   fires at that fraction of every second, not on the whole seconds;
4. **leasecron on PostgreSQL** (``--pg``, default
   ``postgresql://127.0.0.1:5432/test``): a schema of its own, made and
   dropped by ``speedlib.pg_schema.postgres_bench_store``;
5. **APScheduler 3 on PostgreSQL**: ``SQLAlchemyJobStore(url=
   "postgresql+psycopg2://…", tablename="aps_bench_<random>")`` in that same
   schema;
6. **APScheduler 4 on PostgreSQL**: ``SQLAlchemyDataStore(
   "postgresql+psycopg://…", schema="leasecron_peers_<pid>_aps4")`` (a schema
   of its own on the same server: its table names are fixed) and
   ``PsycopgEventBroker`` (``LISTEN``/``NOTIFY``) on the same server.

APScheduler 3 and 4 are one distribution (``apscheduler``): APScheduler 4
runs from a virtual environment of its own, made on first use in the cache
directory (``--venv-dir``, default ``~/.cache/leasecron-peers``; see
``peerslib/venvs.py``), as is celery with celery-redbeat. Their versions are
printed. ``--pg ''``, a PostgreSQL that does not answer, or no psycopg2: the
PostgreSQL systems are left out; ``--redis ''`` or a Redis that does not
answer: APScheduler 4 on SQLite (and, below, the systems on Redis); an
environment that could not be made (no package index): its systems. A line
says which, and why.

Every process of the six systems starts; once all are up the window is
chosen: the ``--slots`` whole seconds (default 30) starting a little over 2 s
later. Each handler does one thing, note ``time.time_ns()`` as it starts.
leasecron hands its handler the slot (``ctx.slot_ms``); so does APScheduler 4
(``apscheduler.current_job.get().scheduled_fire_time``). APScheduler 3 does
not: the job returns its start time, and the ``EVENT_JOB_EXECUTED`` event
that follows carries both that return value and the ``scheduled_run_time``
of the run, which is the slot (no rounding of the start time is needed, and
a run that starts more than a second late still counts for its own slot).
The processes stop a few seconds after the last slot (later if a leasecron
run of the window has not finished by then).

How to read the table. One row per system:

* **slots with n runs**: of the window's slots, how many ran 0, 1, 2, 3 or
  more times across the system's processes; ``mean`` runs per slot; ``runs``
  in all;
* **lag**: from the slot to a handler's start, on this host's clock (every
  process, the PostgreSQL server too, runs on this host), p50, p99 and max in
  ms, over every run of the window;
* **vs leasecron, same store**: the system's mean runs per slot and lag p50
  divided by leasecron's on the same store;
* **CPU**: what the system's processes used over the window (user + system),
  together, in % of one core (leasecron's are ``fire_lag.py`` instances,
  which also count their store calls).

Below the table: the runs per process, and the events seen (APScheduler 3's
``missed``: a run more than ``misfire_grace_time`` late, skipped;
``max_instances``: a run skipped because the previous one still ran;
APScheduler 4's jobs its scheduler released with another outcome than
``success``, such as ``missed_start_deadline``; leasecron's ``skip``,
``lost``, ``failed``, ``error``, ``handover``).

The APSchedulers' behaviour, and why. APScheduler 3's ``SQLAlchemyJobStore``
shares the job *definitions*: one row per job id with its pickled state and
its ``next_run_time``. Each process's scheduler wakes at the earliest
``next_run_time``, reads the jobs due (``next_run_time <= now``), hands them
to its own executor, and then writes the next run time back. Nothing marks a
slot as taken by a process: every scheduler that reads the row before
another one has written the next run time runs the job too. As all of them
wake at the same instant (the next run time is the same for all), a slot
runs on one, two or all of them, depending on how their reads and writes
interleave. APScheduler 4 does mark what it takes: a scheduler *acquires* a
due schedule (``acquired_by``, ``acquired_until``: a lease on its row),
makes a job of the fire time, releases the schedule with its next fire
time; the schedulers then acquire the job the same way, one of them runs it.
On PostgreSQL the reads that choose the rows are ``SELECT … FOR UPDATE SKIP
LOCKED``; SQLite has no row locks (SQLAlchemy drops ``FOR UPDATE`` there),
and several schedulers can acquire the same job: APScheduler 4's
``SQLAlchemyDataStore`` warns against SQLite shared by several schedulers
(its issue #959). leasecron claims each slot in the store, atomically: one
process wins the claim and runs it.

Recovery after a SIGKILL
========================

Then (unless ``--no-recovery``) a second run, every system at once again,
each on ``--instances`` processes of its own, in namespaces of its own (see
``peerslib/recovery.py``), and one SIGKILL per system:

* **leasecron** on Redis (``--redis``), on PostgreSQL and on SQLite: a job
  that fires once a minute at the chosen slot's second (``"* * * * *
  <s>"``, ``catch_up_ms=0`` so that the previous minute's slot is not run on
  start), whose handler runs 5 s; the library's default lease
  (``lease_ms=30_000``, ``heartbeat_ms=5_000``). At the slot one process wins
  the claim and starts the handler; the others get ``running`` and become
  its backups. 1 s into the run its process is SIGKILLed. Its lease runs out
  ``lease_ms`` after its last heartbeat, and a backup, re-checking every 1-2
  heartbeats, takes the run over: its handler starts with reason
  ``takeover``, attempt 2. Expect ``lease_ms`` less up to one heartbeat plus
  up to two: 25-40 s with the defaults;
* **celery beat + RedBeat** on Redis (celery 5, celery-redbeat): ``celery
  beat -S redbeat.RedBeatScheduler`` processes (``peerslib/redbeat_beat.py``)
  with one ``beat_schedule`` entry every second, sent to a queue of the run's
  own (no worker: sending is beat's part). The first process to take
  RedBeat's lock sends the beats; the others wait for the lock. 1 s after the
  slot the process that sent the latest beat is SIGKILLed; its lock expires
  ``redbeat_lock_timeout`` after its last extension (every tick), and a
  standby, retrying every ``beat_max_loop_interval``, takes it and sends the
  next beat. RedBeat's default lock timeout is 5 x ``beat_max_loop_interval``,
  which with celery's default 300 s is 1,500 s (25 minutes; that long beat
  sends nothing after its holder dies): too long to wait for here, so the
  lock timeout is set to leasecron's default lease, 30 s, and the loop
  interval to the 6 s from which RedBeat's rule makes it (both printed);
* **APScheduler 4** on PostgreSQL and on SQLite: the once-a-minute job
  (``CronTrigger(second=<s>)``) with the 5-s handler, ``lease_duration`` its
  default (30 s). The process that runs it is SIGKILLed 1 s into it. What
  follows, in 4.0.0a6: the killed job stays acquired by the dead scheduler;
  once its lease has run out another scheduler may acquire it again, but the
  task's ``running_jobs`` counter, raised when the job was acquired, is only
  lowered when a job is released, and with the task's default
  ``max_running_jobs=1`` no job of the task is acquired while it says 1:
  neither the killed job nor the next minute's. Only ``cleanup()`` releases
  an expired job (as ``abandoned``, not run again), and the synchronous
  ``Scheduler`` runs no periodic clean-up (it passes ``cleanup_interval=None``).
  So, as long as that holds: "no takeover within N s", and what its tables
  hold then is printed.

``--lease S`` gives every system of the recovery run the same lease of S
seconds: leasecron's ``lease_ms`` (``heartbeat_ms`` stays its default,
``min(5 s, lease / 6)``), APScheduler 4's ``lease_duration``, RedBeat's lock
timeout (and a loop interval of S / 5). ``--recovery-deadline`` (default
90 s, longer than the next minute's slot) is how long after its kill a system
is given to recover.

How to read the recovery table. One row per system: its lease (or lock) as
it ran, the process killed (``i<n>``: its index among the system's
processes), **recovered after**: the seconds from the SIGKILL (this host's
clock, just before ``os.kill``) to the next handler start on another process
(for RedBeat: the next beat sent by another process), or "no takeover within
N s"; the process that recovered; and **x leasecron**: that time divided by
leasecron's on the same store (``>`` when the system did not recover: the
deadline divided by leasecron's time, a lower bound). Below it, per system,
what ran again (the killed run taken over, the killed job run again, the
schedule's next job, the next beat) and notes: when RedBeat's standby got the
lock, a slot that several processes started before the kill, what
APScheduler 4's tables hold when it did not recover.

Clean-up: the temporary directory (the SQLite files in it), the PostgreSQL
schemas (when made here: ``leasecron_peers_<pid>``, ``…_aps4``,
``leasecron_peersrec_<pid>``, ``…_aps4``), APScheduler 3's tables, the Redis
keys (leasecron's jobs under the prefix ``leasecron_peers_<pid>``, and every
key naming ``leasecron_peers_<pid>_redbeat``: RedBeat's schedule, entries and
lock, the queue and kombu's bindings) are removed at the end, also after an
error, Ctrl-C or SIGTERM; every process is stopped (its control pipe closed,
then SIGTERM, then SIGKILL after a deadline). A SIGKILL of this script
leaves the schemas and keys behind (``DROP SCHEMA … CASCADE``; the keys
named above); its processes notice the closed pipe and stop on their own.
The peers' environments stay in the cache directory, to be reused.

The peers stay out of leasecron's dependencies: APScheduler 3, SQLAlchemy,
psycopg2 and redis-py come with ``pip install 'leasecron[bench-peers]'``;
APScheduler 4, celery and celery-redbeat live only in their environments
(``peerslib/venvs.py``). The parts (the processes, the systems and their
namespaces, the figures, the recovery) are in ``benchmarks/peerslib/``; this
file runs them side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from typing import Any, Dict, List, Optional

from fire_lag import READY_TIMEOUT_S, WINDOW_LEAD_MS, InstanceReport, Instances, read_report, utc
from peerslib import APSCHEDULER4, LEASECRON_JOB, say
from peerslib import recovery, recovery_run, report, venvs
from peerslib.aps_process import aps_instance_main
from peerslib.figures import compare, figures_of, print_table
from peerslib.systems import System, open_systems, peer_versions, redis_unreachable
from speedlib.sigterm import exit_on_sigterm


#: The first slot of the window comes at least this long after every process is up.
LEAD_MS = 2_000
#: The processes stop this long after the last slot (APScheduler runs a slot up to misfire_grace_time = 1 s late) ...
TAIL_MS = 3_000
#: ... or later, up to this long, until every leasecron run of the window has finished.
FINISH_TIMEOUT_S = 20.0
#: How long processes may take to run their scheduler once told the window.
BOOT_TIMEOUT_S = 30.0


# ===================================================================================
# The parent: running them side by side
# ===================================================================================


@dataclasses.dataclass
class Outcome:
    """A finished run: the window's slots, each system's process reports, and notes on the way."""

    slots: List[int]
    reports: Dict[str, List[InstanceReport]]  # System.label -> its processes' reports
    notes: List[str]


def run_side_by_side(systems: List[System], processes: int, slots: int, workdir: str) -> Outcome:
    """Start every system's processes at once, choose the window once all are up, wait past it,
    stop them all and read what they logged."""
    owners = [(system, i) for system in systems for i in range(processes)]
    outs = [os.path.join(workdir, f"{s.scheduler}-{s.store_name}-{i}.jsonl") for s, i in owners]
    who = ", ".join(f"i{k * processes}-i{(k + 1) * processes - 1} {s.label}" for k, s in enumerate(systems))
    say(f"starting {len(owners)} processes ({who})")
    group = Instances(len(owners), lambda k: owners[k][0].argv(owners[k][1], slots, outs[k]), workdir, "peers")
    notes: List[str] = []
    try:
        group.wait_all("ready", READY_TIMEOUT_S)
        first = math.ceil((time.time() * 1000 + LEAD_MS) / 1000) * 1000
        window = [first + k * 1000 for k in range(slots)]
        say(f"all up; the window: {slots} slots from {utc(window[0])} to {utc(window[-1])} UTC")
        group.send({"first_slot_ms": first})
        booted = group.wait_all("booted", BOOT_TIMEOUT_S + LEAD_MS / 1000)
        for (system, i), message in zip(owners, booted):
            late_ms = int(message["store_ms"]) - first
            if late_ms > -WINDOW_LEAD_MS:  # fire_lag.py's CPU window opens WINDOW_LEAD_MS before the first slot
                notes.append(f"{system.label}: process {i} started its scheduler {late_ms:+d} ms from the first"
                             " slot; it is in the figures")  # fmt: skip
        wait_past(group, window, systems)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}\n(processes: {who})") from exc
    finally:
        group.stop()
    say("stopped every process; reading their logs")
    reports: Dict[str, List[InstanceReport]] = {system.label: [] for system in systems}
    for k, ((system, i), proc) in enumerate(zip(owners, group.procs)):
        if proc.returncode != 0:
            raise RuntimeError(f"{system.label}: process {i} (i{k}) exited with {proc.returncode}: {group.tail(k)}")
        reports[system.label].append(read_report(outs[k], int(booted[k]["store_ms"])))
    return Outcome(window, reports, notes)


def wait_past(group: Instances, window: List[int], systems: List[System]) -> None:
    """Until TAIL_MS after the last slot and every leasecron run of the window finished (at most
    FINISH_TIMEOUT_S more); RuntimeError if a process exits meanwhile."""
    until_s = (window[-1] + TAIL_MS) / 1000
    give_up_s = until_s + FINISH_TIMEOUT_S
    said = 0
    while True:
        now = time.time()
        for k, proc in enumerate(group.procs):
            if proc.poll() is not None:
                raise RuntimeError(f"process i{k} exited during the window: {group.tail(k)}")
        done = sum(1 for slot in window if slot <= now * 1000)
        if done >= said + 10 and done < len(window):
            said = done
            say(f"{done} of {len(window)} slots due so far")
        if now >= until_s and (now >= give_up_s or leasecron_finished(systems, window)):
            return
        time.sleep(min(0.5, max(0.05, until_s - now)))


def leasecron_finished(systems: List[System], window: List[int]) -> bool:
    """Whether every leasecron store holds a finished run for every slot of the window."""
    for system in systems:
        if system.store is not None:
            for slot in window:
                run = system.store.get_run(LEASECRON_JOB, slot)
                if run is None or run.status == "running":
                    return False
    return True


# ===================================================================================
# main
# ===================================================================================


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line; ``--instance``, ``--recovery-instance`` and the options after them are for the processes."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--slots", type=int, default=30, help="slots in the measured window (default 30)")
    p.add_argument("--instances", type=int, default=3, help="processes per system (default 3)")
    p.add_argument("--pg", default="postgresql://127.0.0.1:5432/test",
                   help="PostgreSQL URL (default postgresql://127.0.0.1:5432/test; '' leaves PostgreSQL out)")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0",
                   help="Redis URL (default redis://127.0.0.1:6379/0; '' leaves out the systems that need it)")
    p.add_argument("--venv-dir", default=venvs.default_dir(),
                   help=f"where the peers' environments are made and kept (default {venvs.default_dir()})")
    p.add_argument("--lease", type=float, metavar="S",
                   help="recovery: every system's lease (lock) in seconds (default: leasecron's and APScheduler 4's"
                        " own, 30 s; RedBeat's lock 30 s)")
    p.add_argument("--recovery-deadline", type=float, default=90.0, metavar="S",
                   help="recovery: give up on a system this long after its kill (default 90)")
    p.add_argument("--no-recovery", action="store_true", help="only the table, no recovery measurement")
    p.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    hidden = argparse.SUPPRESS
    p.add_argument("--recovery-instance", action="store_true", help=hidden)
    p.add_argument("--store", help=hidden)
    p.add_argument("--lease-ms", type=int, default=0, help=hidden)
    p.add_argument("--hold-s", type=float, default=recovery.HOLD_S, help=hidden)
    p.add_argument("--instance", action="store_true", help=hidden)
    p.add_argument("--aps-url", help=hidden)
    p.add_argument("--table", help=hidden)
    p.add_argument("--schema", default="", help=hidden)
    p.add_argument("--index", type=int, default=0, help=hidden)
    p.add_argument("--out", help=hidden)
    args = p.parse_args(argv)
    if args.slots < 1 or args.instances < 1:
        p.error("--slots and --instances must be at least 1")
    if (args.lease is not None and args.lease < 1) or args.recovery_deadline <= 0:
        p.error("--lease must be at least 1 s and --recovery-deadline positive")
    return args


def main() -> int:
    """The benchmark (or, with ``--instance``/``--recovery-instance``, one process); 1 if a process failed."""
    args = parse_args()
    if args.instance:
        return aps_instance_main(args)
    if args.recovery_instance:
        return recovery.instance_main(args)
    exit_on_sigterm()
    versions = peer_versions()
    made: Dict[str, Any] = {"venvs": {}, "left_out": {}}
    envs = report.peers_environments(args, made)
    redis_url = args.redis
    why = "--redis ''" if not redis_url else redis_unreachable(redis_url)
    if why is not None:
        made["left_out"]["Redis"] = why
        redis_url = ""
    recovered: List[recovery_run.Recovery] = []
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp, ExitStack() as stack:
        made["Redis"] = report.redis_version(redis_url) if redis_url else None
        try:
            systems, table_made = open_systems(stack, tmp, args.pg, redis_url, envs.get(APSCHEDULER4))
            made.update({k: v for k, v in table_made.items() if k != "left_out"})
            made["left_out"].update(table_made["left_out"])
            if "pg_skipped" in made:
                say(f"PostgreSQL left out: {made['pg_skipped']}")
            outcome = run_side_by_side(systems, args.instances, args.slots, tmp)
            rows = [figures_of(system, outcome.reports[system.label], outcome.slots) for system in systems]
            compare(rows)
            if not args.no_recovery:
                pg = "" if "pg_skipped" in made else args.pg
                contenders, made["recovery"] = recovery.open_contenders(stack, tmp, pg, redis_url, envs, args.lease)
                made["left_out"].update(made["recovery"]["left_out"])
                say(f"recovery: each system's processes start; one is killed; deadline {args.recovery_deadline:g} s")
                recovered = recovery_run.run_recovery(contenders, args.instances, args.recovery_deadline, tmp)
        except RuntimeError as exc:
            print(f"peers: a process failed: {exc}", file=sys.stderr)
            return 1
        say("cleaning up")
    report.print_header(args, made, versions, outcome.slots)
    print_table(rows)
    for note in outcome.notes:
        print(f"note: {note}")
    if recovered:
        print()
        recovery_run.print_recovery(recovered, args.instances)
    sys.stdout.flush()
    if args.json:
        figures = report.figures_json(args, made, versions, outcome.slots, rows, recovered, outcome.notes)
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the processes are stopped and the stores cleaned up by now
        print("peers: interrupted", file=sys.stderr)
        sys.exit(130)
