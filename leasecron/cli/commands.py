"""The operators' commands: ``runs`` (what the store holds), ``jobs`` (each job's last and next
run, its pause and pending manual runs), ``check`` (can we reach the store, and how fast; with an
app, is a job overdue or failing), ``run`` (run a LeaseCron object from an importable module until SIGTERM).

One implementation serves both command lines: ``runs_output``, ``jobs_output`` and
``check_output`` take a store (or a LeaseCron) and return the lines to print, ``run_cron`` runs
the cron, and the ``cmd_*`` functions are the ``leasecron`` command's glue. Expected failures
raise :class:`~leasecron.ConfigError` (exit 2) or :class:`CommandError` (exit 1). ``runs`` and
``jobs`` create nothing (see :func:`reading`); ``check`` creates the schema, as the first
instance would.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..announcements import schedules_in_use
from ..engine.clock import StoreClock
from ..errors import ConfigError
from ..runs import Run
from ..cron import LeaseCron
from .targets import load_cron
from ..stores import Store, open_store
from ..stores.checks import MAX_RECENT_JOBS
from ..jobs import expired_request, shown_schedule
from ..formatting import format_duration, utc_text
from ..watching import read_watches
from .tables import JobRow, job_dict, jobs_lines, runs_lines

__all__ = [
    "CHECK_PROBE_JOB",
    "COUNT_CAP",
    "CommandError",
    "app_defaults",
    "check_output",
    "check_report",
    "cmd_check",
    "cmd_jobs",
    "cmd_run",
    "cmd_runs",
    "jobs_output",
    "load_cron",
    "reading",
    "run_cron",
    "runs_output",
]

#: The job name ``check`` reads: no real job has it, so the answer is always "no run".
CHECK_PROBE_JOB = "__leasecron_check__"
CHECK_SAMPLES = 20
#: ``jobs`` counts at most this many stored runs of a job (and then prints ``1000+``).
COUNT_CAP = 1000


class CommandError(Exception):
    """An expected failure of a command: its message is printed, the exit code is 1."""


def _print(lines: List[str]) -> None:
    for line in lines:
        print(line)


@contextmanager
def reading(store: Store) -> Iterator[Store]:
    """``store``, with its ``create`` flag off while the block runs: reading it creates nothing.

    For a store its owner opened to create what is missing, such as an app's
    (``--app``, ``flask leasecron``): a store whose schema is ready stays as
    it is; one that was never used raises :class:`~leasecron.StoreError`
    naming what is missing instead of creating it. A store without the flag
    (a store class of the user's own) is read as it is.
    """
    before = getattr(store, "create", None)
    if not isinstance(before, bool):
        yield store
        return
    setattr(store, "create", False)  # noqa: B010 - not every Store has the attribute
    try:
        yield store
    finally:
        setattr(store, "create", before)  # noqa: B010


# -- runs --------------------------------------------------------------------------------


def cmd_runs(args: argparse.Namespace) -> int:
    """``leasecron runs URL [--job NAME] [--limit N] [--json]``."""
    _check_limit(args.limit)
    store = open_store(args.url, create=False)
    try:
        _print(runs_output(store, args.job, args.limit, args.json))
    finally:
        store.close()
    return 0


def runs_output(store: Store, job: Optional[str], limit: int, as_json: bool) -> List[str]:
    """The lines ``runs`` prints: every job's (or ``job``'s) newest ``limit`` runs, newest slot first.

    ``as_json``: one JSON list of the runs' :meth:`~leasecron.Run.to_dict`. Creates nothing
    (:func:`reading`).
    """
    _check_limit(limit)
    with reading(store):
        jobs = [job] if job else store.jobs()
        runs: List[Run] = []
        for name in jobs:
            runs.extend(store.runs(name, limit=limit))
        if as_json:
            return [json.dumps([run.to_dict() for run in runs], indent=2)]
        if not runs:
            what = f"job {job!r}" if job else "any job"
            return [f"No runs of {what} in {store!r}."]
        return runs_lines(runs, store.now_ms(), repr(store))


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {limit}")


# -- jobs --------------------------------------------------------------------------------


def cmd_jobs(args: argparse.Namespace) -> int:
    """``leasecron jobs [URL] [--app module:attr] [--json]``."""
    cron = load_cron(args.app, what="--app") if args.app else None
    if args.url is None and cron is None:
        raise ConfigError("give a store URL, or --app module:attr (whose LeaseCron names the store)")
    store = open_store(args.url, create=False) if args.url is not None else None
    try:
        _print(jobs_output(store or _store_of(cron), cron, args.json))
    finally:
        if store is not None:
            store.close()
    return 0


def app_defaults(cron: Optional[LeaseCron]) -> Optional[Dict[str, Any]]:
    """The job defaults of ``cron`` (its options given to ``LeaseCron(...)``), None without one."""
    return None if cron is None else dict(cron._defaults)


def _store_of(cron: Optional[LeaseCron]) -> Store:
    assert cron is not None
    return cron.store


def jobs_output(store: Store, cron: Optional[LeaseCron], as_json: bool) -> List[str]:
    """The lines ``jobs`` prints: each job with stored runs, paused or with requests for manual
    runs (and each job of ``cron``), with its last run, how many runs the store keeps, its pause,
    its pending manual runs and a request made since its last run started that expired unclaimed
    (:func:`~leasecron.jobs.expired_request`) (one :meth:`~leasecron.Store.job_states` call for every job, one
    :meth:`~leasecron.Store.recent_runs` per 1,000 jobs), the schedules stored in the store (an
    override, or a stored job: one :meth:`~leasecron.Store.schedule_changes` call) and — from
    them and the schedules of the code, ``cron``'s or those the live instances announce (one
    :meth:`~leasecron.Store.instances` call) — its next slot. Creates nothing (:func:`reading`)."""
    registered = cron.jobs if cron is not None else {}
    defaults = app_defaults(cron)
    with reading(store):
        now_ms = store.now_ms()
        states = {state.job: state for state in store.job_states()}
        records = {record.job: record for record in store.schedule_changes(0).changes}
        in_use = schedules_in_use(store.instances())
        stored = {name for name, record in records.items() if record.active}
        names = sorted(set(store.jobs()) | set(registered) | set(states) | stored | set(in_use))
        runs_of: Dict[str, List[Run]] = {}
        for start in range(0, len(names), MAX_RECENT_JOBS):  # one store call per 1,000 jobs
            runs_of.update(store.recent_runs(names[start : start + MAX_RECENT_JOBS], COUNT_CAP + 1))
    rows = []
    for name, runs in runs_of.items():
        job, uses = registered.get(name), in_use.get(name, ())
        schedule, options = shown_schedule(job, records.get(name), defaults, uses[0] if uses else None)
        rows.append(
            JobRow(
                name=name,
                stored=min(len(runs), COUNT_CAP),
                capped=len(runs) > COUNT_CAP,
                last=runs[0] if runs else None,
                schedule=schedule,
                next_ms=schedule.next_after(now_ms) if schedule is not None else None,
                registered=job is not None,
                state=states.get(name),
                expired=expired_request(states.get(name), runs[0] if runs else None),
                options=options,
                record=records.get(name),
                in_use=uses,
            )
        )
    if as_json:
        return [json.dumps([job_dict(row) for row in rows], indent=2)]
    if not rows:
        registered_too = "" if cron is None else " or registered"
        return [f"No jobs in {store!r}: no job has stored runs, is paused or has a stored schedule{registered_too}"]
    return jobs_lines(rows, now_ms, repr(store), with_app=cron is not None)


# -- check -------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """``leasecron check [URL] [--app module:attr] [--failed] [--json]``: reach the store, create
    its schema, measure clock and round trip; with ``--app``, exit 1 naming each overdue job (and
    with ``--failed`` each job whose last run failed)."""
    cron = load_cron(args.app, what="--app") if args.app else None
    if args.url is None and cron is None:
        raise ConfigError("give a store URL, or --app module:attr (whose LeaseCron names the store)")
    store = open_store(args.url) if args.url is not None else None  # ConfigError: exit 2
    try:
        lines, code = check_report(store or _store_of(cron), cron, failed=args.failed, as_json=args.json)
        _print(lines)
    finally:
        try:
            if store is not None:
                store.close()
        except Exception:  # noqa: BLE001 - closing a store that failed must not hide the failure
            pass
    return code


def check_output(store: Store) -> List[str]:
    """The lines ``check`` prints: the store reached, its schema created, its clock offset and
    round trip measured. Raises :class:`CommandError` naming the failure when it cannot."""
    return check_report(store)[0]


def check_report(
    store: Store, cron: Optional[LeaseCron] = None, *, failed: bool = False, as_json: bool = False
) -> Tuple[List[str], int]:
    """The lines ``check`` prints and its exit code: the store reached, its schema created, its
    clock offset and round trip measured; with ``cron`` (``--app``) every job it knows watched
    (:func:`~leasecron.watching.read_watches`): exit code 1 when one is overdue or, with
    ``failed``, its newest run failed, each named on a line of its own. ``as_json``: one JSON
    object. Raises :class:`CommandError` naming the failure when the store cannot be used."""
    if failed and cron is None:
        raise ConfigError("--failed needs --app module:attr: the jobs checked are those the app knows")
    try:
        facts = _check(store)
        watched = read_watches(store, cron.jobs, app_defaults(cron)) if cron is not None else None
    except Exception as exc:  # noqa: BLE001 - any failure to reach the store is the answer
        raise CommandError(f"check of {store!r} failed: {type(exc).__name__}: {exc}") from exc
    jobs = list(watched.jobs.values()) if watched is not None else []
    overdue = [seen for seen in jobs if seen.overdue]
    failing = [seen for seen in jobs if failed and seen.failed]
    code = 1 if overdue or failing else 0
    if as_json:
        facts.update(ok=code == 0, overdue=[seen.job for seen in overdue], failed=[seen.job for seen in failing])
        if watched is not None:
            facts.update(now_ms=watched.now_ms, jobs=[seen.to_dict() for seen in jobs])
        return [json.dumps(facts, indent=2)], code
    lines = _check_lines(facts)
    if watched is not None:
        counted = f"{len(overdue)} overdue" + (f", {len(failing)} failed" if failed else "")
        lines.append(f"jobs          {len(jobs)} watched (registered by the app, or stored): {counted}")
        for seen in overdue:
            assert seen.overdue_slot_ms is not None
            late = format_duration(watched.now_ms - seen.overdue_slot_ms)
            lines.append(f"OVERDUE       {seen.job}: its slot {utc_text(seen.overdue_slot_ms)} UTC has no run, due"
                         f" {late} ago (max_late_ms {seen.max_late_ms} + 10 s)")  # fmt: skip
        for seen in failing:
            assert seen.last is not None
            error = (seen.last.error or "").strip().splitlines()[-1:] or ["no error recorded"]
            slot = utc_text(seen.last.slot_ms)
            lines.append(f"FAILED        {seen.job}: its last run (slot {slot} UTC) failed: {error[0]}")
    lines.append("ok" if code == 0 else f"not ok: {len(overdue)} overdue, {len(failing)} failed")
    return lines, code


def _check(store: Store) -> Dict[str, Any]:
    store.get_run(CHECK_PROBE_JOB, 0)  # the first real call: connects and creates the schema
    jobs = store.jobs()
    offset, trip = _clock_offset(store)
    samples = []
    for _ in range(CHECK_SAMPLES):
        before = time.perf_counter()
        store.get_run(CHECK_PROBE_JOB, 0)
        samples.append((time.perf_counter() - before) * 1000)
    return {
        "store": store.kind, "repr": repr(store), "server": store.server_version(),
        "replication": list(store.replication()), "warnings": list(store.durability_warnings()),
        "jobs_with_runs": len(jobs), "clock_offset_ms": round(offset, 1), "clock_read_ms": round(trip, 2),
        "round_trip_ms": {"median": round(statistics.median(samples), 2), "max": round(max(samples), 2),
                          "calls": CHECK_SAMPLES},
    }  # fmt: skip


def _check_lines(facts: Dict[str, Any]) -> List[str]:
    """The text of :func:`_check`'s facts, but the last line."""
    trip = facts["round_trip_ms"]
    lines = [f"store         {facts['store']}  {facts['repr']}", f"server        {facts['server']}"]
    lines += [f"replication   {line}" for line in facts["replication"]]
    lines += [f"WARNING       {warning}" for warning in facts["warnings"]]
    lines += [
        f"schema        ok ({facts['jobs_with_runs']} job(s) with stored runs)",
        f"clock offset  {facts['clock_offset_ms']:+.1f} ms (the store's clock minus this host's; read with a"
        f" {facts['clock_read_ms']:.2f} ms round trip)",
        f"round trip    median {trip['median']:.2f} ms, max {trip['max']:.2f} ms ({trip['calls']} calls of get_run)",
    ]
    return lines


def _clock_offset(store: Store, samples: int = 5) -> Tuple[float, float]:
    """The store's clock minus the local wall clock, and the round trip, in ms, from the sample
    with the shortest round trip (as an instance measures it, :class:`~leasecron.engine.clock.StoreClock`).

    A store's clock counts whole milliseconds (it truncates), so its true time
    lies in ``[now_ms, now_ms + 1)``: the middle, ``now_ms + 0.5``, is compared.
    """
    clock = StoreClock(store)
    clock.sync(samples)
    assert clock.round_trip_ms is not None
    return clock.offset_ms + 0.5, clock.round_trip_ms


# -- run ---------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """``leasecron run module:attr``: run the LeaseCron until SIGTERM/SIGINT (a second one: at once)."""
    run_cron(load_cron(args.target), args.target, args.log_level)
    return 0


def run_cron(cron: LeaseCron, label: str, log_level: str = "INFO") -> None:
    """Run ``cron`` in the foreground until SIGTERM or SIGINT, logging on stderr at ``log_level``.

    The first signal stops gracefully (live runs are handed over, up to
    ``stop_timeout_ms``); a second one while stopping stops at once.
    """
    logging.basicConfig(level=getattr(logging, log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"leasecron: running {label} ({cron!r}); SIGTERM or Ctrl-C stops it", file=sys.stderr, flush=True)
    cron.run_forever()
    print(f"leasecron: {label} stopped", file=sys.stderr, flush=True)
