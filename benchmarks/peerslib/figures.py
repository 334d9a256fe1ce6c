"""The figures of ``peers.py``: per system, runs per slot, fire lag and CPU over the window, and the table.

Each system's processes logged their runs (``fire_lag.read_report`` reads
leasecron's and APScheduler's logs alike): a slot of the window counts the
runs made for it across the processes (0, 1, 2, 3 or more); the lag is from
the slot to each run's start on this host's clock, over every run; the
ratios divide a system's mean runs per slot and lag p50 by leasecron's on
the same store.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from fire_lag import InstanceReport, percentile

from . import LEASECRON
from .systems import System


@dataclass
class Figures:
    """One system's figures over the window."""

    system: str
    scheduler: str
    store: str
    slots: int
    slots_with: Dict[str, int]  # "0", "1", "2", "3+" -> slots that ran that many times
    runs: int
    mean_runs: float  # runs per slot
    lag_ms: Dict[str, Optional[float]]  # p50, p99, max over every run
    cpu_percent: Optional[float]  # all its processes together, % of one core
    runs_per_process: Dict[str, int]
    events: Dict[str, int]
    errors: List[str]
    vs_leasecron: Dict[str, Optional[float]] = field(default_factory=dict)


def figures_of(system: System, reports: List[InstanceReport], window: List[int]) -> Figures:
    """Count and time the window's runs across a system's processes."""
    slots = set(window)
    starts = [(report.runner, s) for report in reports for s in report.starts if s.slot_ms in slots]
    per_slot = Counter(s.slot_ms for _, s in starts)
    ran = Counter(min(per_slot[slot], 3) for slot in window)
    lags = [s.wall_ns / 1e6 - s.slot_ms for _, s in starts]
    lag: Dict[str, Optional[float]] = {"p50": None, "p99": None, "max": None}
    if lags:
        lag = {"p50": percentile(lags, 50), "p99": percentile(lags, 99), "max": max(lags)}
    measured = [(r.cpu_s, r.window_s) for r in reports if r.cpu_s is not None and r.window_s]
    cpu = None
    if measured and len(measured) == len(reports):
        cpu = 100 * sum(c for c, _ in measured) / statistics.mean(w for _, w in measured if w)
    events: Counter[str] = Counter()
    for report in reports:
        events.update(report.events)
    return Figures(
        system=system.label, scheduler=system.scheduler, store=system.store_name, slots=len(window),
        slots_with={"0": ran[0], "1": ran[1], "2": ran[2], "3+": ran[3]}, runs=len(starts),
        mean_runs=len(starts) / len(window), lag_ms=lag,
        cpu_percent=cpu, runs_per_process={r.runner: sum(1 for runner, _ in starts if runner == r.runner)
                                           for r in reports},
        events=dict(events), errors=[e for r in reports for e in r.errors][:5],
    )  # fmt: skip


def compare(rows: List[Figures]) -> None:
    """Each row's runs per slot and lag p50 against leasecron's on the same store."""
    base = {row.store: row for row in rows if row.scheduler == LEASECRON}
    for row in rows:
        ref = base.get(row.store)
        if ref is None:
            continue
        p50, ref_p50 = row.lag_ms["p50"], ref.lag_ms["p50"]
        row.vs_leasecron = {
            "runs_per_slot": row.mean_runs / ref.mean_runs if ref.runs else None,
            "lag_p50": p50 / ref_p50 if p50 is not None and ref_p50 else None,
        }


def fmt(value: Optional[float], spec: str, suffix: str = "") -> str:
    """``value`` formatted, or ``-`` when there is none."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


#: The table's columns after the system's name: title (also the width).
COLUMNS = ("slots", "0 runs", "1 run", "2 runs", "3+ runs", "runs/slot", "runs", "lag p50", "lag p99", "lag max",
           "x runs/slot", "x lag p50", "CPU %")  # fmt: skip
#: What the columns mean, printed under the table.
LEGEND = (
    "n runs: slots of the window that ran n times across the system's processes; runs/slot: the mean",
    "lag: ms from the slot to a handler's start (this host's clock), over every run of the window"
    " (nearest-rank percentiles: under 100 runs, p99 is the max)",
    "x: against leasecron on the same store; CPU: the system's processes together over the window, % of one core",
)


def print_table(rows: List[Figures]) -> None:
    """The table, one row per system, then per-process runs and events."""
    width = max(len(row.system) for row in rows)
    print(f"{'system':<{width}}  " + "  ".join(COLUMNS))
    for row in rows:
        cells = [str(row.slots)] + [str(row.slots_with[k]) for k in ("0", "1", "2", "3+")]
        cells += [f"{row.mean_runs:.2f}", str(row.runs)] + [fmt(row.lag_ms[k], ".1f") for k in ("p50", "p99", "max")]
        cells += [fmt(row.vs_leasecron.get(k), ".2f", "x") for k in ("runs_per_slot", "lag_p50")]
        cells.append(fmt(row.cpu_percent, ".1f"))
        print(f"{row.system:<{width}}  " + "  ".join(f"{cell:>{len(title)}}" for cell, title in zip(cells, COLUMNS)))
    for line in LEGEND:
        print(f"  {line}")
    print()
    for row in rows:
        spread = ", ".join(f"{runner} {n}" for runner, n in row.runs_per_process.items())
        events = ", ".join(f"{k} {n}" for k, n in sorted(row.events.items())) or "none"
        print(f"{row.system}: runs per process: {spread}; events: {events}")
        for error in row.errors[:2]:
            print(f"  {error[:200]}")
