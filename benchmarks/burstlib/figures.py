"""The figures of one store's burst, its targets, and the table of every store's.

:func:`figures` turns what ``fire_lag.run_phase`` collected (a ``Phase``: the
instances' handler starts and store calls, the store's records) into a dict
of plain numbers, the same figures ``fire_lag.report_phase`` prints, for the
``--json`` output and the summary; :func:`print_targets` prints the issue's
targets, met or missed, under fire_lag's report; :func:`print_table` the
stores side by side.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import fire_lag
from fire_lag import Baseline, Phase, percentile

from .host import host_line


@dataclasses.dataclass(frozen=True)
class Target:
    """How late the last handler of a burst may start, and the setup it is stated for."""

    jobs: int
    instances: int
    last_ms: float
    stores: Optional[Tuple[str, ...]]  # None: every store
    text: str


#: The targets of issue 16, as stated there.
TARGETS = (
    Target(10_000, 3, 3000.0, ("cluster",),
           "10,000 jobs due at once on 3 instances, Redis Cluster: the last starts < 3 s"),
    Target(1_000, 3, 300.0, None,
           "1,000 jobs due at once on 3 instances: the last handler starts < 300 ms after the slot on every store"),
)  # fmt: skip


def target_for(kind: str, jobs: int, instances: int) -> Tuple[Target, bool]:
    """The target a burst is judged by, and whether it is stated for this very setup: the one of
    its setup, else the one whose job count is nearest (on a log scale)."""
    for target in TARGETS:
        if (target.jobs, target.instances) == (jobs, instances) and (target.stores is None or kind in target.stores):
            return target, True
    return min(TARGETS, key=lambda t: abs(math.log(max(jobs, 1) / t.jobs))), False


def spread(values: Sequence[float]) -> Optional[Dict[str, float]]:
    """min, p50, p99 and max, rounded to 0.01 ms; None for no values."""
    if not values:
        return None
    figures = (min(values), percentile(values, 50), percentile(values, 99), max(values))
    return dict(zip(("min", "p50", "p99", "max"), (round(v, 2) for v in figures)))


def figures(kind: str, phase: Phase, base: Baseline) -> Dict[str, Any]:
    """Every figure of the measured burst (fire_lag's, as numbers), the warm-up's in brief."""
    counted = fire_lag.tally(phase)
    runs = counted.runs
    firsts = list(counted.first.values())
    found = fire_lag.lags(phase, counted, base)
    started = found["handler_start"]
    lag = {key: spread(values) for key, values in found.items()}
    jobs, instances = len(phase.jobs), len(phase.instances)
    target, as_stated = target_for(kind, jobs, instances)
    last_ms = round(max(started), 2) if started else None
    calls = call_counts(phase)
    total_calls = sum(n for n, _ in calls.values())
    return {
        "store": kind,
        "jobs": jobs,
        "instances": instances,
        "slot_ms": phase.slots[0],
        "slot_utc": fire_lag.utc(phase.slots[0]),
        "baseline": {"bare_round_trip_ms": round(base.bare_ms, 3), "bare_is": base.what,
                     "now_ms_ms": round(base.now_ms_ms, 3), "store_clock_minus_host_ms": round(base.offset_ms, 1)},
        "warmup": warmup(phase, base),
        "every_slot_once": slot_counts(counted, phase),
        "lag_ms": lag,
        "last_start_ms": last_ms,
        "target": {"text": target.text, "last_ms": target.last_ms, "as_stated": as_stated,
                   "stated_for": f"{target.jobs} jobs x {target.instances} instances"
                                 + (f" on {'/'.join(target.stores)}" if target.stores else ""),
                   "met": last_ms is not None and last_ms < target.last_ms},
        "runs": runs,
        "runs_per_instance": dict(Counter(s.runner for s in firsts)),
        "store_calls": {
            "by_operation": {op: {"calls": n, "mean_ms": round(ns / n / 1e6, 3)} for op, (n, ns) in calls.items()},
            "total": total_calls,
            "per_run": round(total_calls / runs, 3) if runs else None,
        },
        "round_trips": round_trips(phase, runs),
        "cpu": cpu(phase, runs),
        "events": dict(sum((Counter(inst.events) for inst in phase.instances), Counter())),
        "errors": [error for inst in phase.instances for error in inst.errors[:2]],
    }  # fmt: skip


def slot_counts(counted: fire_lag.Tally, phase: Phase) -> Dict[str, Any]:
    """The (job, slot)s due by handler starts (one, none, more) and by the store's records (as
    ``fire_lag.print_runs_per_slot`` names them), and whether each had one start and a success at
    attempt 1."""
    records: Counter = Counter()
    for key in counted.due:
        run = phase.records.get(key)
        if run is None:
            records["no record"] += 1
        else:
            records[f"{run.status} at attempt {run.attempt}" + (" (handed over)" if run.handed_over else "")] += 1
    due, once = len(counted.due), sum(1 for key in counted.due if counted.per_slot[key] == 1)
    return {
        "due": due, "once": once,
        "none": sum(1 for key in counted.due if counted.per_slot[key] == 0),
        "more": sum(1 for key in counted.due if counted.per_slot[key] > 1),
        "store_records": dict(records),
        "met": once == due and records["success at attempt 1"] == due,
    }  # fmt: skip


def warmup(phase: Phase, base: Baseline) -> Optional[Dict[str, Any]]:
    """The warm-up slot (each job's first: not measured): its last handler's start, and its slots
    counted as the measured one's."""
    if phase.warmup is None:
        return None
    counted = fire_lag.tally(phase.warmup)
    lags = [s.wall_ns / 1e6 + base.offset_ms - s.slot_ms for s in counted.first.values()]
    return {
        "slot_utc": fire_lag.utc(phase.warmup.slots[0]),
        "last_start_ms": round(max(lags), 2) if lags else None,
        **slot_counts(counted, phase.warmup),
    }


def call_counts(phase: Phase) -> Dict[str, Tuple[int, int]]:
    """Store calls by operation, all instances: those about the measured slot and the others made
    while the window was open (as ``fire_lag.print_calls`` adds them up): (calls, ns)."""
    calls = fire_lag.call_counts(phase)
    ordered = sorted(calls.items(), key=lambda item: (not item[0].startswith("claim"), -item[1][0]))
    return {op: (n, ns) for op, (n, ns) in ordered}


def round_trips(phase: Phase, runs: int) -> Optional[Dict[str, Any]]:
    """What the instances counted at the client over the window, against the store calls they
    made in it; None if an instance counted nothing."""
    wires = [(inst.wire, inst.window_calls) for inst in phase.instances]
    if not all(wire is not None and made for wire, made in wires):
        return None
    sent = sum(wire[0] for wire, _ in wires if wire is not None)
    made = sum(made for _, made in wires if made)
    unit = next(wire[1] for wire, _ in wires if wire is not None)
    return {
        "count": sent, "unit": unit, "store_calls_in_window": made,
        "per_store_call": round(sent / made, 3), "per_run": round(sent / runs, 3) if runs else None,
    }  # fmt: skip


def cpu(phase: Phase, runs: int) -> Optional[Dict[str, Any]]:
    """Each instance's CPU seconds over the window, the sum, and the sum per run; None if the
    window did not close in every instance."""
    measured = [(inst.runner, inst.cpu_s, inst.window_s) for inst in phase.instances]
    if not all(c is not None and w for _, c, w in measured):
        return None
    total = sum(c for _, c, _ in measured if c is not None)
    return {
        "window_s": round(sum(w for _, _, w in measured if w) / len(measured), 2),
        "by_instance_s": {runner: round(c, 3) for runner, c, _ in measured if c is not None},
        "total_s": round(total, 3),
        "ms_per_run": round(1000 * total / runs, 3) if runs else None,
    }


# -- printing ------------------------------------------------------------------------------


def print_targets(fig: Dict[str, Any]) -> None:
    """The issue's figures of one store, each with its target: met or MISSED."""
    once = fig["every_slot_once"]
    met = "met" if once["met"] else "MISSED"
    records = ", ".join(f"{k}: {n}" for k, n in once["store_records"].items())
    print(f"  every slot exactly once: {once['once']} of {once['due']} slots had one handler start"
          f" (none: {once['none']}, more: {once['more']}); the store recorded {records}: {met}")  # fmt: skip
    if once["none"] and not once["more"]:
        print(f"    ({once['none']} slots had not started when the instances stopped, {fig.get('tail_s', '?')} s"
              " after the slot; none ran twice)")  # fmt: skip
    warm = fig["warmup"]
    if warm is not None and not warm["met"]:
        records = ", ".join(f"{k}: {n}" for k, n in warm["store_records"].items())
        print(f"  the warm-up slot (not measured) did not run once each: one handler start {warm['once']},"
              f" none {warm['none']}, more {warm['more']} of {warm['due']}; the store recorded {records}")  # fmt: skip
    target = fig["target"]
    aside = "" if target["as_stated"] else f" (stated for {target['stated_for']})"
    if fig["last_start_ms"] is None:
        print(f"  no handler started: target < {target['last_ms']:.0f} ms{aside}: MISSED")
        return
    met = "met" if target["met"] else "MISSED"
    lag = fig["lag_ms"]["handler_start"]
    print(f"  the last handler started {fig['last_start_ms']:.0f} ms after the slot (p50 {lag['p50']:.0f},"
          f" p99 {lag['p99']:.0f} ms): target < {target['last_ms']:.0f} ms{aside}: {met}")  # fmt: skip


def print_host(fig: Dict[str, Any]) -> None:
    """The host's CPU over the burst's window: the instances', the server's, everything else's."""
    cpu_ = fig.get("cpu")
    line = host_line(fig.get("host") or {}, None if cpu_ is None else cpu_["total_s"])
    if line is not None:
        print(line)


def print_table(all_figures: List[Dict[str, Any]]) -> None:
    """One line per store: the issue's figures side by side."""
    print("\nsummary (lag in ms after the slot, on the store's clock; per run: all instances)")
    head = (f"  {'store':<13} {'jobs':>6} {'once':>6} {'last':>7} {'p50':>6} {'p99':>6} {'calls/run':>9}"
            f" {'trips/run':>9} {'CPU ms/run':>10} {'busy cores':>10}  target")  # fmt: skip
    print(head)
    for fig in all_figures:
        label = f"{fig['store']}#{fig['run']}" if "run" in fig else fig["store"]  # burst.py --repeat: each run
        if "error" in fig:
            print(f"  {label:<13} {fig.get('jobs', ''):>6} {fig['error']}")
            continue
        lag = fig["lag_ms"]["handler_start"] or {}
        target = fig["target"]
        trips = (fig["round_trips"] or {}).get("per_run")
        cpu_ = (fig["cpu"] or {}).get("ms_per_run")
        busy = (fig.get("host") or {}).get("busy_cores")
        last = fig["last_start_ms"]
        print(
            f"  {label:<13} {fig['jobs']:>6} {'met' if fig['every_slot_once']['met'] else 'MISSED':>6}"
            f" {_num(last, 0):>7} {_num(lag.get('p50'), 0):>6} {_num(lag.get('p99'), 0):>6}"
            f" {_num(fig['store_calls']['per_run'], 2):>9} {_num(trips, 2):>9} {_num(cpu_, 2):>10}"
            f" {_num(busy, 2):>10}  < {target['last_ms']:.0f} ms: {'met' if target['met'] else 'MISSED'}"
            + ("" if target["as_stated"] else f" (stated for {target['stated_for']})")
        )


def _num(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
