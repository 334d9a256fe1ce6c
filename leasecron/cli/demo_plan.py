"""What ``leasecron demo`` runs and what it promises: its job, the timing, the workers' options,
and the bounds within which a backup must take a slot over.

Every process of the demo runs on this host and stamps its events with the wall
clock (:func:`now_ms`): one clock, so the lines of several processes fall in one order.
"""

from __future__ import annotations

import time

__all__ = [
    "EVERY_MS",
    "HANDOVER_BOUND_MS",
    "JOB",
    "TAKEOVER_BOUND_MS",
    "TERM_DELAY_S",
    "WORKERS",
    "WORKER_OPTIONS",
    "WORK_S",
    "now_ms",
]

JOB = "demo"
EVERY_MS = 2_000
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
#: A SIGKILLed runner's slot is taken over at most this long after its last heartbeat.
TAKEOVER_BOUND_MS = LEASE_MS + 2 * HEARTBEAT_MS
#: A SIGTERMed runner's released slot is run by a backup at most this long after the release.
HANDOVER_BOUND_MS = 2 * HEARTBEAT_MS


def now_ms() -> int:
    """The wall clock in epoch milliseconds, as the workers stamp their events."""
    return time.time_ns() // 1_000_000
