"""leasecron beside APScheduler 3: the same job on 3 processes sharing one store, runs per slot and fire lag.

    python benchmarks/peers.py [--slots 30] [--instances 3] [--pg URL] [--json PATH]

What it measures. Four systems run side by side, at the same time, each on
``--instances`` OS processes (default 3) of its own, each process holding the
same one job that fires every second:

1. **leasecron on SQLite**: a temporary SQLite file; each process is
   ``fire_lag.py``'s instance (``LeaseCron(store, runner="i<n>",
   jitter_ms=0)``, the library's other defaults, the job added as
   ``cron.add_job(handler, 1, name="job0")``: 1 s, an interval aligned to the
   Unix epoch);
2. **APScheduler on SQLite**: in each process a ``BackgroundScheduler(
   jobstores={"default": SQLAlchemyJobStore(url="sqlite:///<the same file>",
   tablename="aps_bench_<random>")}, timezone=UTC)`` and, as every process of
   a service does on start, ``scheduler.add_job(tick, "cron", second="*",
   id="tick", replace_existing=True)`` (a cron trigger on every whole second,
   which fires on the same whole seconds as leasecron's interval; an
   ``"interval"`` trigger would start from the moment it was added); the
   scheduler's defaults otherwise (``misfire_grace_time=1``, ``coalesce=True``,
   ``max_instances=1``);
3. **leasecron on PostgreSQL** (``--pg``, default
   ``postgresql://127.0.0.1:5432/test``): a schema of its own, made and
   dropped by ``store_ops.postgres_bench_store``;
4. **APScheduler on PostgreSQL**: ``SQLAlchemyJobStore(url=
   "postgresql+psycopg2://…", tablename="aps_bench_<random>")`` in that same
   schema.

``--pg ''``, a PostgreSQL that does not answer, or no psycopg2: the two
PostgreSQL systems are left out, and a line says so.

Every process of the four systems starts; once all are up the window is
chosen: the ``--slots`` whole seconds (default 30) starting a little over 2 s
later. Each handler does one thing, note ``time.time_ns()`` as it starts.
leasecron hands its handler the slot (``ctx.slot_ms``). APScheduler does not
hand the job its scheduled time: the job returns its start time, and the
``EVENT_JOB_EXECUTED`` event that follows carries both that return value and
the ``scheduled_run_time`` of the run, which is the slot (no rounding of the
start time is needed, and a run that starts more than a second late still
counts for its own slot). The processes stop a few seconds after the last
slot (later if a leasecron run of the window has not finished by then).

How to read the output. One row per system:

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

Below the table: the runs per process, and the events seen (APScheduler's
``missed``: a run more than ``misfire_grace_time`` late, skipped;
``max_instances``: a run skipped because the previous one still ran;
leasecron's ``skip``, ``lost``, ``failed``, ``error``, ``handover``).

APScheduler's behaviour, and why. A ``SQLAlchemyJobStore`` shares the job
*definitions*: one row per job id with its pickled state and its
``next_run_time``. Each process's scheduler wakes at the earliest
``next_run_time``, reads the jobs due (``next_run_time <= now``), hands them
to its own executor, and then writes the next run time back. Nothing marks a
slot as taken by a process: every scheduler that reads the row before
another one has written the next run time runs the job too. As all of them
wake at the same instant (the next run time is the same for all), a slot
runs on one, two or all of them, depending on how their reads and writes
interleave. leasecron claims each slot in the store: one process wins the
claim and runs it.

Clean-up: the temporary directory (the SQLite file in it), the PostgreSQL
schema (when made here) and APScheduler's tables are removed at the end, also
after an error, Ctrl-C or SIGTERM; every process is stopped (its control pipe
closed, then SIGTERM, then SIGKILL after a deadline). A SIGKILL of this script
leaves the schema behind (``DROP SCHEMA leasecron_peers_<pid> CASCADE``); its
processes notice the closed pipe and stop on their own.

APScheduler 3 and SQLAlchemy are benchmark-only dependencies:
``pip install 'leasecron[peers]'``. The parts (the APScheduler process, the
systems and their namespaces, the figures) are in ``benchmarks/peerslib/``;
this file runs them side by side.
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
from peerslib import LEASECRON_JOB, say
from peerslib.aps_process import aps_instance_main
from peerslib.figures import compare, figures_of, print_table
from peerslib.systems import WORKLOADS, System, open_systems, peer_versions
from store_ops import exit_on_sigterm

import leasecron

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


def print_header(args: argparse.Namespace, made: Dict[str, Any], versions: Dict[str, str], window: List[int]) -> None:
    """The versions, the machine, and the workload."""
    stores = f"SQLite {made['SQLite']}" + (f", {made['PostgreSQL']}" if "PostgreSQL" in made else "")
    print(f"leasecron {leasecron.__version__}, APScheduler {versions['APScheduler']},"
          f" SQLAlchemy {versions['SQLAlchemy']}; {stores}")  # fmt: skip
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, load {load}, Python {sys.version.split()[0]},"
          f" niceness {os.getpriority(os.PRIO_PROCESS, 0)}")  # fmt: skip
    if "pg_skipped" in made:
        print(f"PostgreSQL left out ({made['pg_skipped']}): its two systems are not measured")
    print(f"{args.instances} processes per system, all systems at once; {len(window)} slots,"
          f" {utc(window[0])} to {utc(window[-1])} UTC; each process:")  # fmt: skip
    for name, workload in WORKLOADS.items():
        print(f"  {name}: {workload}")
    print("the handler notes time.time_ns() and returns; APScheduler's slot: the scheduled_run_time of the"
          " EVENT_JOB_EXECUTED event of its run (the job is not given it)")  # fmt: skip
    print()


# ===================================================================================
# main
# ===================================================================================


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line; ``--instance`` and the options after it are for the APScheduler processes."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--slots", type=int, default=30, help="slots in the measured window (default 30)")
    p.add_argument("--instances", type=int, default=3, help="processes per system (default 3)")
    p.add_argument("--pg", default="postgresql://127.0.0.1:5432/test",
                   help="PostgreSQL URL (default postgresql://127.0.0.1:5432/test; '' leaves PostgreSQL out)")
    p.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    hidden = argparse.SUPPRESS
    p.add_argument("--instance", action="store_true", help=hidden)
    p.add_argument("--aps-url", help=hidden)
    p.add_argument("--table", help=hidden)
    p.add_argument("--schema", default="", help=hidden)
    p.add_argument("--index", type=int, default=0, help=hidden)
    p.add_argument("--out", help=hidden)
    args = p.parse_args(argv)
    if args.slots < 1 or args.instances < 1:
        p.error("--slots and --instances must be at least 1")
    return args


def main() -> int:
    """The benchmark (or, with ``--instance``, one APScheduler process); 1 if a process failed."""
    args = parse_args()
    if args.instance:
        return aps_instance_main(args)
    exit_on_sigterm()
    versions = peer_versions()
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp, ExitStack() as stack:
        systems, made = open_systems(stack, tmp, args.pg)
        if "pg_skipped" in made:
            say(f"PostgreSQL left out: {made['pg_skipped']}")
        try:
            outcome = run_side_by_side(systems, args.instances, args.slots, tmp)
        except RuntimeError as exc:
            print(f"peers: a process failed: {exc}", file=sys.stderr)
            return 1
        rows = [figures_of(system, outcome.reports[system.label], outcome.slots) for system in systems]
        compare(rows)
        say("cleaning up")
    print_header(args, made, versions, outcome.slots)
    print_table(rows)
    for note in outcome.notes:
        print(f"note: {note}")
    sys.stdout.flush()
    if args.json:
        figures = {
            "machine": {"cores": os.cpu_count(), "load": list(os.getloadavg()), "python": sys.version.split()[0],
                        "niceness": os.getpriority(os.PRIO_PROCESS, 0)},
            "versions": {"leasecron": leasecron.__version__, **versions, "SQLite": made["SQLite"],
                         "PostgreSQL": made.get("PostgreSQL")},
            "workload": {"processes_per_system": args.instances, "slots": args.slots,
                         "first_slot_ms": outcome.slots[0], **WORKLOADS},
            "made": made, "systems": [dataclasses.asdict(row) for row in rows], "notes": outcome.notes,
        }  # fmt: skip
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the processes are stopped and the stores cleaned up by now
        print("peers: interrupted", file=sys.stderr)
        sys.exit(130)
