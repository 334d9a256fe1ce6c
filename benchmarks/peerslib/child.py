"""What the peers' own processes share (APScheduler 4, celery beat): the parent's protocol, stdlib only.

These processes run in virtual environments of their own (``peerslib.venvs``),
where neither leasecron nor ``benchmarks/`` is importable: this module is
imported by file location (it sits next to the scripts that run there), and
repeats the few parts of ``fire_lag.py``'s instance protocol they need. With
the parent: one JSON line per message on stdout (``ready``, ``booted``,
``start``, ``beat``, ...), the control message on stdin (the window's first
slot), end of stdin meaning stop; the window's runs in the file format
``fire_lag.read_report`` reads.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections import Counter
from types import FrameType
from typing import IO, Any, Dict, List, Optional, Tuple

#: The CPU window opens this long before the first slot and closes this long before the slot after the last
#: (``fire_lag.WINDOW_LEAD_MS``, repeated: fire_lag cannot be imported here).
WINDOW_LEAD_MS = 500

_out_lock = threading.Lock()
#: Where the JSON lines go: the real stdout, even if a library prints to ``sys.stdout`` meanwhile.
_out: IO[str] = sys.stdout


def keep_stdout_for_parent() -> None:
    """Send whatever else prints to ``sys.stdout`` (celery's banner) to stderr: stdout carries JSON lines only."""
    sys.stdout = sys.stderr


def tell_parent(ev: str, **fields: Any) -> None:
    """One JSON line on stdout (thread-safe)."""
    line = json.dumps({"ev": ev, **fields}) + "\n"
    with _out_lock:
        _out.write(line)
        _out.flush()


def stop_on_signals() -> threading.Event:
    """A process's start: log warnings to stderr, and an event that SIGTERM and SIGINT set (the
    parent's way to stop it, besides closing stdin)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


class ControlPipe:
    """The parent's control message, read from stdin by a daemon thread; end of file sets ``stop``."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._messages: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        threading.Thread(target=self._read, name="control-pipe", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self._messages.put(json.loads(line))
        self.stop.set()

    def first(self) -> Optional[Dict[str, Any]]:
        """The control message, or None if told to stop first."""
        while not self.stop.is_set():
            try:
                return self._messages.get(timeout=0.1)
            except queue.Empty:
                continue
        return None


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    times = os.times()
    return times.user + times.system


def wait_until_ms(due_ms: float, stop: threading.Event) -> bool:
    """Sleep until this host's clock reaches ``due_ms`` (epoch ms); False if ``stop`` was set first."""
    while not stop.is_set():
        left_ms = due_ms - time.time() * 1000
        if left_ms <= 0:
            return True
        stop.wait(min(left_ms / 1000, 0.5))
    return False


def cpu_over(first_ms: int, slots: int, stop: threading.Event) -> Dict[str, Any]:
    """CPU seconds over ``fire_lag.py``'s window of ``slots`` slots from ``first_ms`` (empty if stopped first)."""
    if not wait_until_ms(first_ms - WINDOW_LEAD_MS, stop):
        return {}
    cpu0, mono0 = cpu_seconds(), time.monotonic()
    if not wait_until_ms(first_ms + slots * 1000 - WINDOW_LEAD_MS, stop):
        return {}
    return {"cpu_s": cpu_seconds() - cpu0, "window_s": time.monotonic() - mono0}


def write_report(
    path: str, runner: str, job: str, measured: Dict[str, Any], events: Counter, errors: List[str],
    starts: List[Tuple[int, int]],
) -> None:  # fmt: skip
    """The output ``fire_lag.read_report`` reads: a summary line, then one line per run (slot_ms, wall_ns)."""
    with open(path, "w", encoding="utf-8") as out:
        summary = {"ev": "instance", "runner": runner, "pid": os.getpid(), **measured, "calls": []}
        summary.update(events=dict(events), errors=errors[:5])
        out.write(json.dumps(summary) + "\n")
        for slot_ms, wall_ns in starts:
            line = {"ev": "start", "job": job, "slot_ms": slot_ms, "attempt": 1, "reason": "schedule"}
            out.write(json.dumps({**line, "wall_ns": wall_ns}) + "\n")
