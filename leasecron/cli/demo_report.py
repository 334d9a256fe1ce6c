"""The end of ``leasecron demo``: the stored runs, what happened, and the verdict.

The verdict is computed honestly from two sources: the workers' own event
logs (every slot from the first to the last seen has exactly one ``success``
event and no handler completed twice) and the store (each of those slots is
stored as ``success``, by the runner and attempt that logged it).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, Dict, List, Optional, Tuple

from ..runs import Run
from ..states import Status
from ..stores import open_store
from .commands import format_table

__all__ = ["JOB", "EVERY_MS", "DemoRecord", "clock", "report", "verdict"]

JOB = "demo"
EVERY_MS = 2_000


def clock(ms: Optional[int]) -> str:
    """``HH:MM:SS.mmm`` in local time."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S.") + f"{ms % 1000:03d}"


@dataclasses.dataclass(frozen=True)
class DemoRecord:
    """What the demo saw, for its report: the store, when the workers started and how long
    they ran, every event each worker logged (``(worker, event)`` in arrival order), what
    happened at the slots the demo acted on, the stories' summaries and any notes."""

    url: str
    launch_ms: int
    seconds: float
    log: List[Tuple[str, Dict[str, Any]]]
    marks: Dict[int, str]
    summaries: List[str]
    notes: List[str]


def report(demo: DemoRecord) -> int:
    """Print the stored runs and the stories; return the verdict's exit code."""
    store = open_store(demo.url)
    try:
        stored = {r.slot_ms: r for r in store.runs(JOB, limit=1_000_000) if r.slot_ms >= demo.launch_ms}
    finally:
        store.close()
    marks = demo.marks
    print(f"\nStored runs of job {JOB!r}, read from the store after every worker stopped:")
    rows = [
        [clock(r.slot_ms), str(r.attempt), r.runner, r.status, r.reason, "yes" if r.handed_over else "no",
         marks.get(r.slot_ms, "")]
        for r in sorted(stored.values(), key=lambda r: r.slot_ms)
    ]  # fmt: skip
    headers = ["slot", "attempt", "runner", "status", "reason", "handed over", "what happened"]
    for line in format_table(headers, rows, align="lr"):
        print("  " + line)
    print()
    for summary in demo.summaries:
        print(summary)
    for note in demo.notes:
        print(f"Note:      {note}")
    return verdict(demo, stored)

def verdict(demo: DemoRecord, stored: Dict[int, Run]) -> int:
    """Every slot from the first to the last seen: one success event in all logs, stored as success."""
    seen = {e["slot_ms"] for _, e in demo.log if e.get("job") == JOB and e.get("slot_ms") is not None}
    seen |= set(stored)
    if not seen:
        print(f"No slot came due in {demo.seconds:g} s: nothing ran, nothing to check (try --seconds 30).")
        return 0
    first, last = min(seen), max(seen)
    slots = sorted(set(range(first, last + 1, EVERY_MS)) | seen)
    problems = []
    for slot in slots:
        wins = [(w, e) for w, e in demo.log if e.get("slot_ms") == slot and e.get("event") == "success"]
        ends = [e for _, e in demo.log if e.get("slot_ms") == slot and e.get("event") == "handler-end"]
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
            problems.append(f"{clock(slot)} ({'; '.join(why)})")
    span = f"{len(slots)} slots from {clock(first)} to {clock(last)}"
    if problems:
        print(f"FAILED: not every slot ran exactly once: {len(problems)} of {span} did not:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print(
        f"OK: every slot ran exactly once: {span}, each with exactly one success event across the"
        " workers' logs and stored as success."
    )
    return 0
