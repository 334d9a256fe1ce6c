"""The bounds every delay and overlap is judged by, from the run's own round trips."""

from __future__ import annotations

import dataclasses
from typing import Optional

from .model import Model
from .report import NS, OVERLAP_EXTRA_MS, Config, Delays


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The run's measured round trip and the bounds derived from it (ms)."""

    rtt_p99_ms: float
    overlap_ms: float
    takeover_ms: float
    handover_ms: float
    margin_ms: float
    lease_ms: float


def bounds_of(model: Model, config: Config) -> Bounds:
    """The bounds, from the round trips of answered heartbeats that no fault or freeze touched
    (the network's own round trip: a fault's delays are excused where they matter, not
    folded into every bound)."""
    calls = [
        (att, c)
        for att in model.attempts.values()
        for c in att.calls
        if c["ev"] == "heartbeat" and c.get("ok") is not None
    ]
    trips = [
        (c["recv_mono_ns"] - c["sent_mono_ns"]) / NS
        for att, c in calls
        if not model.faulted(c["sent_mono_ns"], c["recv_mono_ns"], att.runner, frozen_writers=True)
        and not _frozen(model, att.pid, c["sent_mono_ns"], c["recv_mono_ns"])
    ] or [(c["recv_mono_ns"] - c["sent_mono_ns"]) / NS for _, c in calls]
    if not trips:
        trips = [(c["t1_mono_ns"] - c["t0_mono_ns"]) / NS for c in model.claims if c.get("outcome") is not None]
    rtt = Delays(0, trips).p99 or 0.0
    hb = config.heartbeat_ms
    return Bounds(
        rtt_p99_ms=rtt,
        overlap_ms=hb + rtt + config.tick_ms + OVERLAP_EXTRA_MS,
        takeover_ms=config.lease_ms + 2 * hb + rtt + config.margin_ms,
        handover_ms=2 * hb + rtt + config.margin_ms,
        margin_ms=config.margin_ms,
        lease_ms=config.lease_ms,
    )


def _frozen(model: Model, pid: Optional[int], a: int, b: int) -> bool:
    proc = model.proc(pid)
    return proc is not None and proc.frozen_during(a, b)


def fmt_ms(ns: float) -> str:
    return f"{ns / NS:.0f} ms"
