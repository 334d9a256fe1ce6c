"""SIGTERM as ``SystemExit``: a benchmark stopped by its runner still removes what it made."""

from __future__ import annotations

import signal
import sys


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so cleanups in ``finally`` run."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
