"""The small commands: ``runs`` (what the store holds), ``check`` (can we reach it, and how
fast), ``run`` (run a LeaseCron object from an importable module until SIGTERM).

Each ``cmd_*`` function takes the parsed arguments and returns the exit code;
expected failures raise :class:`~leasecron.ConfigError` (exit 2) or
:class:`CommandError` (exit 1), which :func:`leasecron.cli.main` prints
without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from typing import List, Optional, Sequence

from ..errors import ConfigError
from ..runs import RUNNING, Run
from ..scheduler import LeaseCron
from ..stores import Store, open_store

__all__ = ["CommandError", "cmd_runs", "cmd_check", "cmd_run", "format_table", "CHECK_PROBE_JOB"]

#: The job name ``check`` reads: no real job has it, so the answer is always "no run".
CHECK_PROBE_JOB = "__leasecron_check__"
CHECK_SAMPLES = 20
ERROR_WIDTH = 48


class CommandError(Exception):
    """An expected failure of a command: its message is printed, the exit code is 1."""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> List[str]:
    """Lines of a plain-text table: a header, a rule, the rows; ``align`` holds ``l``/``r`` per column."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            right = i < len(align) and align[i] == "r"
            parts.append(cell.rjust(widths[i]) if right else cell.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(row) for row in rows]


# -- runs --------------------------------------------------------------------------------


def cmd_runs(args: argparse.Namespace) -> int:
    """``leasecron runs URL [--job NAME] [--limit N] [--json]``."""
    if args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {args.limit}")
    store = open_store(args.url)
    try:
        jobs = [args.job] if args.job else store.jobs()
        runs: List[Run] = []
        for job in jobs:
            runs.extend(store.runs(job, limit=args.limit))
        now_ms = store.now_ms()
    finally:
        store.close()
    if args.json:
        print(json.dumps([run.to_dict() for run in runs], indent=2))
        return 0
    if not runs:
        where = f"job {args.job!r}" if args.job else "any job"
        print(f"No runs of {where} in {store!r}.")
        return 0
    with_ms = any(run.slot_ms % 1000 for run in runs)
    rows = [
        [
            run.job,
            _utc(run.slot_ms, with_ms),
            str(run.attempt),
            run.runner,
            run.status,
            _lease_left(run, now_ms),
            "yes" if run.handed_over else "no",
            _short(run.error),
        ]
        for run in runs
    ]
    headers = ["job", "slot (UTC)", "attempt", "runner", "status", "lease left", "handed over", "error"]
    for text in format_table(headers, rows, align="llrlllll"):
        print(text)
    print(f"\n{len(runs)} run(s) of {len(set(r.job for r in runs))} job(s), newest slot first, in {store!r}")
    return 0


def _utc(ms: int, with_ms: bool) -> str:
    text = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{ms % 1000:03d}" if with_ms else text


def _lease_left(run: Run, now_ms: int) -> str:
    if run.status != RUNNING:
        return "-"
    left = run.lease_end_ms - now_ms
    if left > 0:
        return f"{left} ms"
    return "released" if run.handed_over else "expired"


def _short(error: Optional[str]) -> str:
    if not error:
        return "-"
    text = " ".join(error.split())
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 3] + "..."


# -- check -------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """``leasecron check URL``: reach the store, create its schema, measure clock and round trip."""
    store = open_store(args.url)  # ConfigError: exit 2
    try:
        try:
            _check(store)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the store is the answer
            raise CommandError(f"check of {store!r} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        try:
            store.close()
        except Exception:  # noqa: BLE001 - closing a store that failed must not hide the failure
            pass
    return 0


def _check(store: Store) -> None:
    store.get_run(CHECK_PROBE_JOB, 0)  # the first real call: connects and creates the schema
    jobs = store.jobs()
    offset, trip = _clock_offset(store)
    samples = []
    for _ in range(CHECK_SAMPLES):
        before = time.perf_counter()
        store.get_run(CHECK_PROBE_JOB, 0)
        samples.append((time.perf_counter() - before) * 1000)
    print(f"store         {store.kind}  {store!r}")
    print(f"server        {store.server_version()}")
    for warning in store.durability_warnings():
        print(f"WARNING       {warning}")
    print(f"schema        ok ({len(jobs)} job(s) with stored runs)")
    print(f"clock offset  {offset:+.1f} ms (the store's clock minus this host's; read with a {trip:.2f} ms round trip)")
    print(
        f"round trip    median {statistics.median(samples):.2f} ms, max {max(samples):.2f} ms"
        f" ({CHECK_SAMPLES} calls of get_run)"
    )
    print("ok")


def _clock_offset(store: Store, samples: int = 5) -> "tuple[float, float]":
    """The store's clock minus the local wall clock, from the sample with the shortest round trip.

    A store's clock counts whole milliseconds (it truncates), so its true time
    lies in ``[now_ms, now_ms + 1)``: the middle, ``now_ms + 0.5``, is compared.
    """
    best: Optional["tuple[float, float]"] = None
    for _ in range(samples):
        before_wall = time.time_ns() / 1e6
        before = time.perf_counter()
        store_ms = store.now_ms()
        trip = (time.perf_counter() - before) * 1000
        offset = store_ms + 0.5 - (before_wall + trip / 2)
        if best is None or trip < best[1]:
            best = (offset, trip)
    assert best is not None
    return best


# -- run ---------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """``leasecron run module:attr``: run the LeaseCron until SIGTERM/SIGINT (a second one: at once)."""
    cron = load_cron(args.target)
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    print(f"leasecron: running {args.target} ({cron!r}); SIGTERM or Ctrl-C stops it", file=sys.stderr, flush=True)
    cron.run_forever()
    return 0


def load_cron(target: str) -> LeaseCron:
    """Import ``module:attr`` (the current directory first on ``sys.path``) and return the LeaseCron."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected module:attr (for example myapp.tasks:cron), not {target!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"cannot import {module_name!r}: no such module (searched from {cwd})") from None
        raise
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, LeaseCron):
        raise ConfigError(f"{target} is a {type(obj).__name__}, not a leasecron.LeaseCron")
    return obj
