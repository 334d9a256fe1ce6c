"""The demo's set-up and what it prints while it runs: the workers' options, the legend, and
one line per worker event, printed in time order across the processes."""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .demo_report import EVERY_MS, JOB, clock

__all__ = ["WORKERS", "WORKER_OPTIONS", "Printer", "event_text", "now_ms", "print_legend"]

WORK_S = 0.6
LEASE_MS = 1_000
HEARTBEAT_MS = 150
JITTER_MS = 200
WORKERS = 3
#: The worker options. ``--overlap allow``: a takeover run starts up to lease +
#: 2 x heartbeat after its slot and works 0.6 s, so it may still be running when
#: the next slot is due; with ``skip`` that next slot would be skipped as an
#: overlap, and the demo's claim is that *every* slot runs exactly once.
WORKER_OPTIONS = [
    "--job", JOB, "--every", f"{EVERY_MS / 1000:g}", "--work", f"{WORK_S:g}",
    "--lease-ms", str(LEASE_MS), "--heartbeat-ms", str(HEARTBEAT_MS),
    "--jitter-ms", str(JITTER_MS), "--overlap", "allow",
]  # fmt: skip
#: The SIGTERM comes this long after the victim's handler started: the other
#: workers have sent their claims by then (jitter <= 200 ms) and are its backups,
#: and 0.35 s of the handler's work remain for the stop to interrupt.
TERM_DELAY_S = 0.25
TAKEOVER_BOUND_MS = LEASE_MS + 2 * HEARTBEAT_MS
HANDOVER_BOUND_MS = 2 * HEARTBEAT_MS
HOLD_MS = 250  # lines wait this long so that lines from several processes print in time order


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Printer:
    """Prints event lines in time order, each held back ``HOLD_MS`` for late arrivals."""

    heap: List[Tuple[int, int, str]] = field(default_factory=list)
    seq: "itertools.count[int]" = field(default_factory=itertools.count)

    def add(self, t: int, who: str, slot_ms: Optional[int], text: str) -> None:
        line = f"{clock(t)}  {who:<9}  {clock(slot_ms):<12}  {text}"
        heapq.heappush(self.heap, (t, next(self.seq), line))

    def flush(self, everything: bool = False) -> None:
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
