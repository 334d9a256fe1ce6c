"""Did every slot of the demo run exactly once? Read from the store and judged from two sources.

The workers' own event logs: every slot from the first to the last seen has exactly one
``success`` event and no handler completed twice. The store: each of those slots is stored
as ``success``, by the runner and attempt that logged it. A slot that fails either is a
problem, with every reason it fails.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

from ..runs import Run
from ..states import Status
from ..stores import open_store
from .demo_plan import EVERY_MS, JOB

__all__ = ["Verdict", "judge", "stored_runs"]


def stored_runs(url: str, since_ms: int) -> Dict[int, Run]:
    """The runs of the demo's job the store at ``url`` keeps, by slot, from ``since_ms`` on."""
    store = open_store(url)
    try:
        return {r.slot_ms: r for r in store.runs(JOB, limit=1_000_000) if r.slot_ms >= since_ms}
    finally:
        store.close()


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The slots judged, in order (none: no slot came due), and each slot that did not run
    exactly once with the reasons why."""

    slots: List[int]
    problems: List[Tuple[int, List[str]]]

    @property
    def exit_code(self) -> int:
        """The demo's exit code: 1 if a slot did not run exactly once, else 0."""
        return 1 if self.problems else 0


def judge(log: List[Tuple[str, Dict[str, Any]]], stored: Dict[int, Run]) -> Verdict:
    """Every slot from the first to the last seen in ``log`` (each worker's events, as
    ``(worker, event)``) or ``stored``: one success event in all logs, stored as success."""
    seen = {e["slot_ms"] for _, e in log if e.get("job") == JOB and e.get("slot_ms") is not None}
    seen |= set(stored)
    if not seen:
        return Verdict([], [])
    first, last = min(seen), max(seen)
    slots = sorted(set(range(first, last + 1, EVERY_MS)) | seen)
    problems = []
    for slot in slots:
        wins = [(w, e) for w, e in log if e.get("slot_ms") == slot and e.get("event") == "success"]
        ends = [e for _, e in log if e.get("slot_ms") == slot and e.get("event") == "handler-end"]
        run = stored.get(slot)
        why = []
        if len(wins) != 1:
            why.append(f"{len(wins)} success events")
        if len(ends) > 1:
            why.append(f"the handler completed {len(ends)} times")
        if run is None:
            why.append("no stored run")
        elif run.status != Status.SUCCESS:
            why.append(f"stored as {run.status} (attempt {run.attempt}, {run.runner})")
        elif len(wins) == 1 and (wins[0][0], wins[0][1].get("attempt")) != (run.runner, run.attempt):
            why.append(f"stored success is {run.runner} attempt {run.attempt}, not the logged {wins[0][0]}")
        if why:
            problems.append((slot, why))
    return Verdict(slots, problems)
