"""The lease margin: a runner that gives its run up by its local deadline (``lost``, reason
``unrenewed``) does so at least ``lease_margin_ms`` before a backup can begin the slot.

The runner's local deadline is its last confirmed renewal's sending plus ``lease_ms -
lease_margin_ms``; the store's lease ends ``lease_ms`` after it *applied* that renewal (or a later
one whose answer the runner never got), and a backup begins only after its claim found the lease
ended. So the gap from the runner's ``lost`` line to the next attempt's start (both on the host's
monotonic clock) is at least the margin, less :data:`MARGIN_TOLERANCE_MS`.

Not judged (skipped): a runner SIGSTOPped between its last confirmed renewal and its ``lost``
(the margin covers no longer a freeze than itself: ``lost_in_time`` judges those); a run the
runner released after its ``lost`` (a renewal that landed late, given back at once); a stretch
in which the store's clock was stepped, or a replicated store failed over or cut a replica (the
store may have lost a renewal, or counted the lease on a clock that jumped).
"""

from __future__ import annotations

from typing import List, Optional

from .bounds import fmt_ms
from .model import Attempt, Model, Slot
from .report import NS, InvariantResult

__all__ = ["MARGIN_TOLERANCE_MS", "check_margin"]

#: How far the measured gap may fall short of the margin: the keeper thread that aborts the run
#: wakes up a little after the deadline, and the ``lost`` line's clock is read after that (thread
#: scheduling and the clock readings of two processes on one host, a loaded one included).
MARGIN_TOLERANCE_MS = 50
#: The store faults that can end a lease early: its clock jumped, or a failover lost a renewal.
LEASE_FAULTS = {"failover", "replica-cut"}


def check_margin(model: Model, slot: Slot, margin_ms: int, inv: InvariantResult, gaps: List[float]) -> None:
    """For each attempt of ``slot`` that logged ``lost`` (unrenewed) and the next attempt that
    began: the gap (ms, appended to ``gaps``) is at least ``margin_ms - MARGIN_TOLERANCE_MS``."""
    ordered = [a for a in slot.ordered() if a.start_ns is not None]
    for older, newer in zip(ordered, ordered[1:]):
        lost = older.lost
        if lost is None or lost.get("reason") != "unrenewed":
            continue
        newer_start = newer.start_ns
        assert newer_start is not None
        renewed = _last_renewal_sent(older, lost["mono_ns"])
        if renewed is None or _excused(model, older, renewed, lost["mono_ns"], newer_start):
            inv.skipped += 1
            continue
        inv.checked += 1
        gap = newer_start - lost["mono_ns"]
        gaps.append(gap / NS)
        bound_ns = (margin_ms - MARGIN_TOLERANCE_MS) * NS
        if gap < bound_ns:
            inv.fail(
                f"{older.label()} logged lost (unrenewed) {fmt_ms(gap)} before {newer.label()} began"
                f" (lease_margin_ms {margin_ms} ms, tolerance {MARGIN_TOLERANCE_MS} ms)"
            )


def _last_renewal_sent(att: Attempt, before: int) -> Optional[int]:
    """When the attempt's last renewal answered before ``before`` was sent (its local deadline's origin)."""
    sent = [s for s, r in att.renewals() if r <= before]
    return max(sent) if sent else None


def _excused(model: Model, older: Attempt, renewed: int, lost_ns: int, newer_start: int) -> bool:
    proc = model.proc(older.pid)
    if proc is not None and proc.frozen_during(renewed, lost_ns):
        return True
    released = [c for c in older.calls if c["ev"] == "release" and c.get("ok") is not False]
    if any(lost_ns <= c["sent_mono_ns"] <= newer_start for c in released):  # accepted, or may have been
        return True
    settle = model.settle_ns()
    return model.clock_stepped(renewed, newer_start) or bool(
        model.nemesis_in(LEASE_FAULTS, renewed - settle, newer_start)
    )
