"""The numbers of one chaos run: what the harness prints and ``--json`` writes.

:func:`summarize` gathers them as plain JSON-ready values (slots per job and status, the
nemesis's and the operator's actions, violations per invariant, takeover and hand-over
delays, the smallest gap from a ``lost`` by the local deadline to the next attempt's start,
instances that exited on their own); :func:`format_summary` prints them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .checker import Delays, Report

__all__ = ["format_summary", "summarize"]


def _delays(delays: Delays) -> Dict[str, Any]:
    """n, p50, p95, p99, max (ms, rounded), the bound and how many were excused."""

    def r(v: Optional[float]) -> Optional[float]:
        return None if v is None else round(v, 1)

    return {"n": len(delays.samples), "p50": r(delays.p50), "p95": r(delays.p95), "p99": r(delays.p99),
            "max": r(delays.max), "bound": r(delays.bound_ms), "excused": delays.excused}  # fmt: skip


def summarize(
    run: Dict[str, Any],
    final_runs: Dict[str, List[Dict[str, Any]]],
    nemesis: Any,
    operator: Any,
    workers: List[Any],
    unclean: List[str],
    report: Report,
) -> Dict[str, Any]:
    """The run's numbers, as plain JSON-ready values: ``run`` holds store, seed, instances,
    duration_s, lease_ms, heartbeat_ms, poll_ms and workdir; ``nemesis`` and ``operator`` their
    threads (``counts``), ``workers`` the :class:`~chaoslib.instances.WorkerProcess` of each runner."""
    slots: Dict[str, Dict[str, int]] = {}
    for job, runs in final_runs.items():
        by_status: Dict[str, int] = {"total": len(runs)}
        for r in runs:
            by_status[str(r["status"])] = by_status.get(str(r["status"]), 0) + 1
        slots[job] = by_status
    counts = dict(nemesis.counts)
    unexpected = [
        {"runner": w.runner, "pid": pid, "exit": code, "signal_sent": sig}
        for w in workers
        for pid, code, sig in w.unexpected
    ]
    return {
        **run,
        "workdir": str(run["workdir"]),
        "slots": slots,
        "nemesis": counts,
        "kills": counts.get("kill", 0),
        "freezes": counts.get("stop", 0),
        "terms": counts.get("term", 0),
        "stalls": counts.get("stall", 0) - counts.get("stall:all", 0),
        "partitions": counts.get("stall:all", 0),
        "latencies": counts.get("latency", 0),
        "resets": counts.get("reset", 0),
        "store_restarts": counts.get("store-restart", 0),
        "clock_steps": counts.get("clock-step", 0),
        "failovers": counts.get("failover", 0),
        "replica_cuts": counts.get("replica-cut", 0),
        "skews_ms": {w.runner: w.skew[0] for w in workers if w.skew is not None},
        "incarnations": sum(w.incarnations for w in workers),
        "operator": dict(operator.counts),
        "violations": {name: len(inv.violations) for name, inv in report.invariants.items()},
        "takeover_ms": _delays(report.takeover),
        "handover_ms": _delays(report.handover),
        "failover_ms": {name: _delays(Delays(0, ms)) for name, ms in report.failover_ms.items()},
        "margin_gap_ms": {
            "n": len(report.margin_gaps_ms),
            "min": None if report.smallest_margin_gap_ms is None else round(report.smallest_margin_gap_ms, 1),
            "margin": report.lease_margin_ms,
            "tolerance": report.margin_tolerance_ms,
        },
        "unexpected_exits": unexpected,
        "unclean_stops": unclean,
        "nemesis_failures": list(nemesis.failures),
    }


def format_summary(summary: Dict[str, Any]) -> str:
    """The harness's summary as text lines."""
    lines = [
        f"store {summary['store']}, seed {summary['seed']}, {summary['instances']} instances,"
        f" {summary['duration_s']:.0f} s, lease {summary['lease_ms']} ms, heartbeat {summary['heartbeat_ms']} ms",
        "slots per job: "
        + "; ".join(
            f"{job} {c.get('total', 0)} ({', '.join(f'{k} {v}' for k, v in sorted(c.items()) if k != 'total')})"
            for job, c in summary["slots"].items()
        ),
        f"nemesis: kills {summary['kills']}, freezes {summary['freezes']}, terms {summary['terms']},"
        f" stalls {summary['stalls']}, partitions {summary['partitions']}"
        f" ({summary['nemesis'].get('partition:blackhole', 0)} dropping), latency {summary['latencies']},"
        f" resets {summary['resets']},"
        f" store restarts {summary['store_restarts']}, store clock steps {summary['clock_steps']},"
        f" failovers {summary['failovers']} ({summary['nemesis'].get('failover:kill', 0)} after kill -9,"
        f" {summary['nemesis'].get('failover:stop', 0)} after SIGSTOP), replicas cut {summary['replica_cuts']}"
        + "".join(
            f", {k} {v}"
            for k, v in sorted(summary["nemesis"].items())
            if k.startswith("store-restart") and k != "store-restart"
        ),  # fmt: skip
        f"instance incarnations: {summary['incarnations']};"
        f" skewed instance clocks (ms): {summary['skews_ms'] or 'none'}",
        "operator: " + (", ".join(f"{k} {v}" for k, v in sorted(summary["operator"].items())) or "nothing"),
        "violations per invariant: " + (", ".join(f"{k} {v}" for k, v in summary["violations"].items() if v) or "none"),
    ]
    for name in ("takeover_ms", "handover_ms"):
        d = summary[name]
        lines.append(
            f"{name[:-3]}: n={d['n']} p50={d['p50']} p95={d['p95']} p99={d['p99']} max={d['max']} ms"
            f" (bound {d['bound']} ms, {d['excused']} excused)"
        )
    gap = summary["margin_gap_ms"]
    lines.append(
        f"lost (unrenewed) -> next attempt: n={gap['n']} smallest={gap['min']} ms"
        f" (lease_margin_ms {gap['margin']} ms, tolerance {gap['tolerance']} ms)"
    )
    for name, d in summary["failover_ms"].items():
        if d["n"]:
            lines.append(f"after a primary kill, {name.replace('_', ' ')}: n={d['n']} p50={d['p50']} max={d['max']} ms")
    if summary["unexpected_exits"]:
        lines.append(f"instances that exited on their own: {summary['unexpected_exits']}")
    if summary["unclean_stops"]:
        lines.append(f"instances killed after SIGTERM timed out at the end: {summary['unclean_stops']}")
    if summary["nemesis_failures"]:
        lines.append(f"nemesis steps that failed (skipped): {summary['nemesis_failures']}")
    lines.append(f"logs: {summary['workdir']}")
    return "\n".join(lines)
