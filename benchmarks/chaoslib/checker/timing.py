"""Timing: ``overlap="skip"``, lateness, firing on the store's clock, takeover and hand-over delays."""

from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Tuple

from .bounds import Bounds, fmt_ms
from .model import Attempt, Model
from .report import (
    CLOCK_SLACK_MS,
    LATE_TOLERANCE_MS,
    NS,
    SCHEDULE_REASON,
    Config,
    Delays,
    InvariantResult,
    Line,
)

Renewal = Tuple[int, int, Attempt]  # received, sent, attempt


def _renewals_of(model: Model, job: str) -> List[Renewal]:
    """Every call that set a lease of ``job`` (won claims, accepted heartbeats), by answer time."""
    out = [(recv, sent, att) for att in model.attempts.values() if att.job == job for sent, recv in att.renewals()]
    return sorted(out, key=lambda r: r[0])


def check_skip(model: Model, job: str, b: Bounds, inv: InvariantResult) -> None:
    renewals = _renewals_of(model, job)
    recvs = [r[0] for r in renewals]
    for att in model.attempts.values():
        if att.job != job or att.won is None:
            continue
        inv.checked += 1
        lo = bisect.bisect_left(recvs, att.won["t0_mono_ns"] - b.lease_ms * NS)
        hi = bisect.bisect_left(recvs, att.won["t0_mono_ns"])
        found = _live_earlier_lease(model, att, renewals[lo:hi], int(b.lease_ms * NS))
        if found is None:
            continue
        other, sent = found
        if _ended_sent(model, other) is None and _finish_unlogged(model, other, att.won["t1_mono_ns"]):
            inv.skipped += 1
        elif model.clock_stepped(sent, att.won["t1_mono_ns"]):
            inv.skipped += 1  # the lease was judged on a store clock that had jumped
        else:
            inv.fail(
                f"{att.label()} won while {other.label()}'s lease was alive"
                f" (renewed {fmt_ms(att.won['t0_mono_ns'] - sent)} before the claim, lease {b.lease_ms:.0f} ms)"
            )


def _ended_sent(model: Model, att: Attempt) -> Optional[int]:
    """:meth:`Attempt.ended_sent`, judged with the slot's final record."""
    return att.ended_sent(model.slot(att.job, att.slot_ms).record)


def _live_earlier_lease(
    model: Model, att: Attempt, renewals: List[Renewal], lease_ns: int
) -> Optional[Tuple[Attempt, int]]:
    """An attempt of an earlier slot whose lease surely outlived ``att``'s winning claim, and its renewal."""
    assert att.won is not None
    t1 = att.won["t1_mono_ns"]
    for _recv, sent, other in renewals:
        if other.slot_ms >= att.slot_ms or t1 >= sent + lease_ns - CLOCK_SLACK_MS * NS:
            continue
        ended = _ended_sent(model, other)
        if ended is None or ended > t1:
            return other, sent
    return None


def _finish_unlogged(model: Model, att: Attempt, before: int) -> bool:
    """Whether the attempt's handler ended and its process was killed before ``before``, so a
    finish the store accepted may never have been logged."""
    proc = model.proc(att.pid)
    return att.end is not None and proc is not None and proc.killed_ns is not None and proc.killed_ns < before


def check_not_late(model: Model, config: Config, inv: InvariantResult) -> None:
    for att in model.attempts.values():
        won = att.won
        if won is None or att.attempt != 1 or not isinstance(won.get("wall_ns"), int):
            continue
        if model.clock_stepped(won["t0_mono_ns"], won["t1_mono_ns"]):
            inv.skipped += 1  # the store judged lateness on a clock that had jumped
            continue
        inv.checked += 1
        allowed = (config.catch_up_ms if won.get("reason") == "catch-up" else config.max_late_ms) + LATE_TOLERANCE_MS
        sent_wall_ms = (won["wall_ns"] - (won["mono_ns"] - won["t0_mono_ns"])) / NS
        late_ms = sent_wall_ms - att.slot_ms
        if late_ms > allowed + config.margin_ms:
            inv.fail(
                f"{att.label()} won by a {won.get('reason')} claim sent {late_ms:.0f} ms after its slot"
                f" (allowed {allowed} ms)"
            )


#: How early a scheduled claim may be sent, by the true wall clock (the instance's estimate of the
#: store's clock is off by up to half a sync's round trip, and drifts until the next sync).
EARLY_SLACK_MS = 200
#: How late a scheduled claim may be sent after its slot when nothing held its process back.
FIRE_WINDOW_MS = 1_000
#: How long after a store clock step an instance may still fire by the old offset (its resync interval).
RESYNC_NS = 61_000 * NS


def _sent_ns(claim: Line) -> int:
    """When a claim was sent (its line's own time if it has no ``t0_mono_ns``)."""
    return int(claim["t0_mono_ns"] if "t0_mono_ns" in claim else claim["mono_ns"])


def check_timing(model: Model, config: Config, not_early: InvariantResult, on_time: InvariantResult) -> None:
    """Instances fire on the store's clock, however skewed their own: no ``early`` answers, and
    each process's first scheduled claim of a slot sent within ``[slot - EARLY_SLACK_MS, slot +
    FIRE_WINDOW_MS]`` of the true time, unless its process was frozen, starting or hit by a fault
    (on SQLite, another instance frozen inside a write holds the write lock: every claim waits)."""
    first: Dict[Tuple[int, str, int], Line] = {}
    for claim in model.claims:
        t0 = _sent_ns(claim)
        if claim.get("outcome") is not None:
            not_early.checked += 1
            if claim.get("outcome") == "early":
                if model.clock_stepped(t0, int(claim.get("t1_mono_ns", t0))):
                    not_early.skipped += 1
                else:
                    not_early.fail(
                        f"{claim.get('job')}@{claim.get('slot_ms')}: claim of {claim.get('runner')} answered early"
                    )
        if claim.get("reason") == SCHEDULE_REASON and isinstance(claim.get("wall_ns"), int):
            key = (claim["pid"], claim["job"], claim["slot_ms"])
            if key not in first or t0 < _sent_ns(first[key]):
                first[key] = claim
    for (pid, job, slot_ms), claim in first.items():
        t0 = _sent_ns(claim)
        sent_wall_ms = (claim["wall_ns"] - (claim["mono_ns"] - t0)) / NS
        lag_ms = sent_wall_ms - slot_ms
        slot_mono = t0 - int(lag_ms * NS)  # the slot's time on the monotonic clock
        proc = model.proc(pid)
        since = slot_mono - FIRE_WINDOW_MS * NS
        held = (
            proc is None
            or proc.running_ns is None
            or proc.running_ns > since
            or proc.frozen_during(since, t0)
            or model.faulted(since, t0, claim.get("runner"), frozen_writers=True)
            or model.clock_stepped(since, t0, RESYNC_NS)
        )
        if -EARLY_SLACK_MS <= lag_ms <= FIRE_WINDOW_MS:
            on_time.checked += 1
        elif held:
            on_time.skipped += 1
        else:
            on_time.checked += 1
            on_time.fail(
                f"{job}@{slot_ms}: {claim.get('runner')} (pid {pid}) sent its scheduled claim"
                f" {lag_ms:+.0f} ms from the slot (window {-EARLY_SLACK_MS}..+{FIRE_WINDOW_MS} ms)"
            )


# ---------------------------------------------------------------------------------------------
# Takeover and hand-over delays
# ---------------------------------------------------------------------------------------------


def _live_at(model: Model, pid: Optional[int], t: int) -> List[Attempt]:
    """The attempts process ``pid`` was running at ``t``: started, not ended, not lost."""
    out = []
    for att in model.attempts.values():
        if att.pid != pid or att.start is None or att.start["mono_ns"] > t:
            continue
        done = [x["mono_ns"] for x in (att.end, att.lost) if x is not None]
        done += [c["sent_mono_ns"] for c in att.calls if c["ev"] in ("finish", "release")]
        if not done or min(done) > t:
            out.append(att)
    return out


def _next_start(model: Model, att: Attempt, after: int) -> Optional[Attempt]:
    slot = model.slots[(att.job, att.slot_ms)]
    later = [
        a for a in slot.ordered() if a.attempt > att.attempt and a.start is not None and a.start["mono_ns"] > after
    ]
    return later[0] if later else None


def _excused(model: Model, victim: Optional[int], a: int, b: int, bound_ns: int) -> bool:
    return model.faulted(a, b, any_scope=True, frozen_writers=True) or not model.available(
        a, min(b, a + bound_ns), victim
    )


def check_delays(model: Model, action: str, delays: Delays, inv: InvariantResult) -> None:
    bound_ns = int(delays.bound_ms * NS)
    for n in model.nemesis:
        if n.get("action") != action:
            continue
        t, pid = n["mono_ns"], n.get("pid")
        proc = model.proc(pid)
        if proc is not None and proc.frozen_at(t):
            continue  # a frozen runner's lease was already running out: not a kill-takeover
        for att in _live_at(model, pid, t):
            if action == "term" and not att.accepted("release"):
                continue
            nxt = _next_start(model, att, t)
            if nxt is None or nxt.start is None:
                continue
            delay = nxt.start["mono_ns"] - t
            delays.samples.append(delay / NS)
            inv.checked += 1
            if delay > bound_ns:
                if _excused(model, pid, t, nxt.start["mono_ns"], bound_ns):
                    delays.excused += 1
                else:
                    inv.fail(
                        f"{att.label()}: {action} -> {nxt.label()} began after {fmt_ms(delay)}"
                        f" (bound {delays.bound_ms:.0f} ms)"
                    )


# ---------------------------------------------------------------------------------------------
# Failovers of a replicated store
# ---------------------------------------------------------------------------------------------

#: The figures of :func:`failover_delays`, in report order, with what each measures.
FAILOVER_FIGURES = {
    "promoted": "a Sentinel names the new primary",
    "next_start": "the next slot starts (the first handler of an attempt 1 that begins after the kill)",
    "takeover": "each run live at the kill (its handler working) starts its next attempt (one sample per run)",
    "settled": "every replica follows the new primary again",
}


def failover_delays(model: Model) -> Dict[str, List[float]]:
    """After each ``kill -9`` of the primary (a ``failover`` line with ``how: kill``), the ms until
    each of :data:`FAILOVER_FIGURES` (no sample when it never came before the logs end)."""
    firsts = sorted(a.start["mono_ns"] for a in model.attempts.values() if a.start is not None and a.attempt == 1)
    out: Dict[str, List[float]] = {name: [] for name in FAILOVER_FIGURES}
    for n in model.nemesis:
        if n.get("action") != "failover" or n.get("how") != "kill":
            continue
        t = n["mono_ns"]
        for name, field in (("promoted", "promoted_ms"), ("settled", "duration_ms")):
            if isinstance(n.get(field), (int, float)):
                out[name].append(float(n[field]))
        later = firsts[bisect.bisect_right(firsts, t) :]
        if later:
            out["next_start"].append((later[0] - t) / NS)
        for pid in model.procs:
            for att in _live_at(model, pid, t):
                nxt = _next_start(model, att, t)
                if nxt is not None and nxt.start is not None:
                    out["takeover"].append((nxt.start["mono_ns"] - t) / NS)
    return out
