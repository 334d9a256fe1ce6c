"""Process signals for :meth:`LeaseCron.run_forever`.

The handler only calls back (the callback sets flags); the previous handlers
are restored on exit. Off the main thread, where Python allows no signal
handlers, it installs nothing.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

__all__ = ["handle_signals", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def handle_signals(callback: Callable[[int], None], signals: Tuple[int, ...] = STOP_SIGNALS) -> Iterator[bool]:
    """Call ``callback(signum)`` on each of ``signals`` while the block runs.

    Yields whether the handlers were installed (only on the main thread).
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous: Dict[int, Any] = {}

    def handler(signum: int, frame: Optional[FrameType]) -> None:
        callback(signum)

    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, handler)
        yield True
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
