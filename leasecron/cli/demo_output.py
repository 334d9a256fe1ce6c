"""What ``leasecron demo`` prints: the legend, one line per worker event while it runs, and at
the end the stored runs, the stories and the verdict.

The event lines of several processes are printed in time order: each is held back
:data:`HOLD_MS` for a line of another process that happened earlier and arrives later.
Times are this host's local time of day to the millisecond (:func:`clock`).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Tuple

from ..runs import Run
from .demo_plan import (
    EVERY_MS,
    HANDOVER_BOUND_MS,
    JOB,
    TAKEOVER_BOUND_MS,
    WORK_S,
    WORKER_OPTIONS,
    WORKERS,
    now_ms,
)
from .demo_verdict import Verdict
from .tables import format_table

__all__ = ["HOLD_MS", "Printer", "clock", "event_text", "print_legend", "print_report", "print_verdict"]

HOLD_MS = 250  # lines wait this long so that lines from several processes print in time order


def clock(ms: Optional[int]) -> str:
    """``HH:MM:SS.mmm`` in local time."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S.") + f"{ms % 1000:03d}"


@dataclass
class Printer:
    """Prints event lines in time order, each held back ``HOLD_MS`` for late arrivals."""

    heap: List[Tuple[int, int, str]] = field(default_factory=list)
    seq: "itertools.count[int]" = field(default_factory=itertools.count)

    def add(self, t: int, who: str, slot_ms: Optional[int], text: str) -> None:
        """Hold the line of what ``who`` did at ``t`` about the slot ``slot_ms`` (if any)."""
        line = f"{clock(t)}  {who:<9}  {clock(slot_ms):<12}  {text}"
        heapq.heappush(self.heap, (t, next(self.seq), line))

    def flush(self, everything: bool = False) -> None:
        """Print the lines held long enough (``everything``: every line held)."""
        limit = now_ms() - HOLD_MS
        while self.heap and (everything or self.heap[0][0] <= limit):
            print(heapq.heappop(self.heap)[2], flush=True)


def print_legend(where: str, seconds: float) -> None:
    """The demo's opening: what runs, where, the plan and how to read the lines."""
    third, two_thirds = f"~{seconds / 3:.0f} s", f"~{2 * seconds / 3:.0f} s"
    width = max(len(third), len(two_thirds), len(f"~{seconds:.0f} s"))
    lines = [
        f"leasecron demo: {WORKERS} worker processes share one store; job {JOB!r} is due every"
        f" {EVERY_MS / 1000:g} s and works {WORK_S:g} s.",
        "Every slot must run exactly once, on one worker, whatever happens to the workers.",
        "",
        f"  store     {where}",
        f"  workers   python -m leasecron.cli.worker {' '.join(WORKER_OPTIONS)}",
        f"  plan      {third:<{width}}  SIGKILL a runner mid-job: a backup takes the slot over as attempt 2 once"
        f" the lease runs out",
        f"            {'':<{width}}  (at most lease + 2 x heartbeat = {TAKEOVER_BOUND_MS} ms after the last"
        " heartbeat)",
        f"            {two_thirds:<{width}}  SIGTERM a runner mid-job: it hands the run over, a backup runs it"
        f" within 2 x heartbeat = {HANDOVER_BOUND_MS} ms",
        f"            {f'~{seconds:.0f} s':<{width}}  stop every worker, print the stored runs, check"
        " that every slot ran exactly once",
        "  legend    won attempt 1 (schedule)  this worker's claim of the slot won",
        "            won attempt 2 (takeover)  a backup took over a run whose lease ran out or was released",
        "            =>                        what the demo does; killed workers come back under new names",
        "",
        f"{'time':<12}  {'who':<9}  {'slot':<12}  what",
        f"{'-' * 12}  {'-' * 9}  {'-' * 12}  {'-' * 40}",
    ]
    print("\n".join(lines), flush=True)


def event_text(ev: Dict[str, Any]) -> Optional[str]:
    """The line a worker's event (but its exit) prints, or None for an event it does not show."""
    kind, attempt = ev.get("event"), ev.get("attempt")
    texts = {
        "ready": f"ready (pid {ev.get('pid')})",
        "start": f"won attempt {attempt} ({ev.get('reason')})",
        "success": f"success (attempt {attempt})",
        "failed": f"FAILED (attempt {attempt}): {ev.get('error')}",
        "skip": f"skipped the slot ({ev.get('reason')})",
        "lost": f"lost its lease (attempt {attempt}): {ev.get('error')}",
        "handover": f"handed the run over (attempt {attempt} released)",
        "aborted": f"handler aborted (signal reason: {ev.get('reason')})",
        "error": f"error: {ev.get('error')}",
        "stopped": "stopped",
        "output": f"said: {ev.get('text')}",
    }
    return texts.get(str(kind))


def print_report(stored: Dict[int, Run], marks: Dict[int, str], summaries: List[str], notes: List[str]) -> None:
    """The end of the demo: the ``stored`` runs, each slot the demo acted on with its mark, the
    stories' summaries and any notes."""
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
    for summary in summaries:
        print(summary)
    for note in notes:
        print(f"Note:      {note}")


def print_verdict(verdict: Verdict, seconds: float) -> None:
    """The last line: every slot ran exactly once, or the slots that did not and why."""
    if not verdict.slots:
        print(f"No slot came due in {seconds:g} s: nothing ran, nothing to check (try --seconds 30).")
        return
    slots = verdict.slots
    span = f"{len(slots)} slots from {clock(slots[0])} to {clock(slots[-1])}"
    if verdict.problems:
        print(f"FAILED: not every slot ran exactly once: {len(verdict.problems)} of {span} did not:")
        for slot, why in verdict.problems:
            print(f"  {clock(slot)} ({'; '.join(why)})")
        return
    print(
        f"OK: every slot ran exactly once: {span}, each with exactly one success event across the"
        " workers' logs and stored as success."
    )
