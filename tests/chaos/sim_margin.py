"""A runner cut off from the store, for ``margin_kept`` (:mod:`chaoslib.checker.margin`): no processes.

:func:`cut_off` writes it into a :class:`~tests.chaos.sim.Sim`: ``runner`` wins ``long2@slot`` at
``slot``, renews its lease at ``slot + 500`` and is cut off from the store after it (its
heartbeats fail from ``slot + 1000`` on; no nemesis line, so the fault excuses nothing else); it
logs ``lost`` at ``lost_at`` (its local deadline is ``slot + 500 + lease - lease_margin_ms``,
``slot + 2300`` for LeaseCron's default of 200 ms); ``backup`` takes the slot over once the
lease ended (``slot + 2500``), begins at ``slot + 2502`` and succeeds 300 ms later. The clean
run (:func:`tests.chaos.sim.clean_run`) has one, with instances M and N at 16000, the gap 202 ms.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .sim import Sim

__all__ = ["cut_off"]


def cut_off(
    sim: "Sim", runner: str, backup: str, slot: int, lost_at: Optional[float] = None, reason: str = "unrenewed"
) -> SimpleNamespace:
    """Write the scenario; returns its ``ids`` (of the cut-off attempt), ``lost`` line and ``start`` (ms)."""
    from .sim import HB

    lost_at = slot + 2300 if lost_at is None else lost_at
    start = slot + 2502
    ids = {"job": "long2", "slot_ms": slot, "attempt": 1, "token": f"{runner}-{slot}"}
    sim.won(runner, "long2", slot, 1, ids["token"], slot)
    sim.claim(backup, "long2", slot, slot, "running", attempt=1, token=ids["token"])
    sim.line(runner, "start", slot + 2, reason="schedule", **ids)
    sim.ticks(runner, ids, slot + 3, lost_at - 1)
    sim.call(runner, "heartbeat", ids, slot + 500, True)
    for t in range(slot + 1000, int(lost_at), HB):
        sim.call(runner, "heartbeat", ids, t, None, error="StoreUnavailable: timed out")
    h = SimpleNamespace(ids=ids, start=start)
    h.lost = sim.line(runner, "event", lost_at, type="lost", reason=reason, **ids)
    sim.line(runner, "abort", lost_at + 1, reason="lost", **ids)
    sim.line(runner, "end", lost_at + 2, outcome="aborted", **ids)
    sim.claim(backup, "long2", slot, slot + 2000, "running", reason="takeover", attempt=1, token=ids["token"])
    token = f"{backup}-{slot}-2"
    sim.won(backup, "long2", slot, 2, token, start - 2, reason="takeover")
    sim.run(backup, "long2", slot, 2, token, start, start + 300, reason="takeover")
    sim.record("long2", slot, 2, token, backup, "success")
    sim.attempts(
        "long2", slot, (1, runner, "schedule", slot, slot + 2500, "expired"),
        (2, backup, "takeover", start - 2, start + 301, "success"),
    )  # fmt: skip
    return h
