"""What ``peers.py`` prints above its tables and writes as JSON, and the peers' environments it asks for.

The header: leasecron's version and the peers' (APScheduler 3 in leasecron's
environment, APScheduler 4 and celery + celery-redbeat in their own), the
stores' versions, the machine, what was left out and why, and each system's
workload. The JSON: all of that, the table's figures and the recovery's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Dict, List

from fire_lag import utc

import leasecron

from . import APSCHEDULER4, REDBEAT, say, venvs
from .figures import Figures
from .recovery import HOLD_S
from .recovery_run import KILL_AFTER_S, Recovery
from .systems import WORKLOADS


def peers_environments(args: argparse.Namespace, made: Dict[str, Any]) -> Dict[str, venvs.Venv]:
    """APScheduler 4's and celery's environments (made now if need be), by scheduler name; the ones that
    could not be made are left out (``made["left_out"]``)."""
    wanted = {APSCHEDULER4: "apscheduler4"} if args.no_recovery else {APSCHEDULER4: "apscheduler4", REDBEAT: "redbeat"}
    try:
        found = venvs.ensure(list(wanted.values()), args.venv_dir, say)
    except OSError as exc:  # the cache directory cannot be written, say
        found = {name: f"{args.venv_dir}: {exc}" for name in wanted.values()}
    ready: Dict[str, venvs.Venv] = {}
    for scheduler, name in wanted.items():
        venv = found[name]
        if isinstance(venv, venvs.Venv):
            ready[scheduler] = venv
            made["venvs"][scheduler] = {"python": venv.python, "versions": venv.versions, "built_s": venv.built_s}
        else:
            made["left_out"][scheduler] = f"its environment could not be made: {venv}"
            say(f"{scheduler} left out: its environment could not be made: {venv}")
    return ready


def print_header(args: argparse.Namespace, made: Dict[str, Any], versions: Dict[str, str], window: List[int]) -> None:
    """The versions, the machine, what was left out, and the workload."""
    stores = f"SQLite {made['SQLite']}" + (f", {made['PostgreSQL']}" if "PostgreSQL" in made else "")
    stores += f", Redis {made['Redis']}" if made.get("Redis") else ""
    print(f"leasecron {leasecron.__version__}; APScheduler {versions['APScheduler']}, SQLAlchemy"
          f" {versions['SQLAlchemy']} (leasecron's environment); {stores}")  # fmt: skip
    for name, venv in made["venvs"].items():
        how = "reused" if venv["built_s"] is None else f"made now in {venv['built_s']:.0f} s"
        shown = ", ".join(f"{k} {v}" for k, v in venv["versions"].items())
        print(f"{name}: {shown} (environment {venv['python']}, {how})")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, load {load}, Python {sys.version.split()[0]},"
          f" niceness {os.getpriority(os.PRIO_PROCESS, 0)}")  # fmt: skip
    if "pg_skipped" in made:
        print(f"PostgreSQL left out ({made['pg_skipped']}): its systems are not measured")
    for what, why in made["left_out"].items():
        print(f"{what} left out: {why}")
    print(f"{args.instances} processes per system, all systems at once; {len(window)} slots,"
          f" {utc(window[0])} to {utc(window[-1])} UTC; each process:")  # fmt: skip
    for name, workload in WORKLOADS.items():
        print(f"  {name}: {workload}")
    print("the handler notes time.time_ns() and returns; APScheduler 3's slot: the scheduled_run_time of the"
          " EVENT_JOB_EXECUTED event of its run (the job is not given it); APScheduler 4's: the running job's"
          " scheduled_fire_time (apscheduler.current_job)")  # fmt: skip
    print()


def figures_json(
    args: argparse.Namespace, made: Dict[str, Any], versions: Dict[str, str], window: List[int], rows: List[Figures],
    recovered: List[Recovery], notes: List[str],
) -> Dict[str, Any]:  # fmt: skip
    """Every figure of the run, for ``--json``."""
    return {
        "machine": {"cores": os.cpu_count(), "load": list(os.getloadavg()), "python": sys.version.split()[0],
                    "niceness": os.getpriority(os.PRIO_PROCESS, 0)},
        "versions": {"leasecron": leasecron.__version__, **versions, "SQLite": made["SQLite"],
                     "PostgreSQL": made.get("PostgreSQL"), "Redis": made.get("Redis"),
                     **{name: venv["versions"] for name, venv in made["venvs"].items()}},
        "workload": {"processes_per_system": args.instances, "slots": args.slots,
                     "first_slot_ms": window[0], **WORKLOADS},
        "made": made, "systems": [dataclasses.asdict(row) for row in rows], "notes": notes,
        "recovery": None if args.no_recovery else {
            "lease_s": args.lease, "deadline_s": args.recovery_deadline, "hold_s": HOLD_S,
            "kill_after_s": KILL_AFTER_S, "systems": [dataclasses.asdict(r) for r in recovered]},
    }  # fmt: skip


def redis_version(url: str) -> str:
    """The Redis server's version."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return str(client.info("server").get("redis_version", "?"))
    finally:
        client.close()
