"""Retrying store calls, never past the time in which their answer matters (:func:`call_until`).

The caller gives the deadline (a heartbeat: its local lease deadline; a
claim: when it would be late) and what to retry (by default only
:class:`~leasecron.StoreUnavailable`). The first try is a plain call;
tenacity takes over only after a failure (``docs/design.rst``, "Store calls
and their retries").
"""

from __future__ import annotations

import random
from typing import Callable, Tuple, Type, TypeVar

import tenacity

from ..errors import StoreUnavailable
from .clock import StoreClock

__all__ = ["call_until", "backoff"]

T = TypeVar("T")

#: The first wait, doubled after each failed attempt up to ``BACKOFF_MAX_S``,
#: plus a random ``[0, BACKOFF_JITTER_S]``.
BACKOFF_FIRST_S = 0.02
BACKOFF_MAX_S = 1.0
BACKOFF_JITTER_S = 0.02


def backoff(failed_attempts: int) -> float:
    """Seconds to wait after ``failed_attempts`` (>= 1) failed attempts."""
    doubled: float = BACKOFF_FIRST_S * 2.0 ** (failed_attempts - 1)
    return min(doubled, BACKOFF_MAX_S) + random.uniform(0.0, BACKOFF_JITTER_S)


def call_until(
    fn: Callable[[], T],
    deadline: float,
    clock: StoreClock,
    retry_on: Tuple[Type[BaseException], ...] = (StoreUnavailable,),
) -> T:
    """Call ``fn`` until it returns, retrying ``retry_on`` errors while the
    monotonic time of ``clock`` (seconds) has not reached ``deadline``; the
    last error is raised once it has. The waits are on ``clock`` too, so a
    test that drives an instance's time drives its retries.
    """
    try:
        return fn()
    except retry_on:
        wait = backoff(1)
        if clock.monotonic() + wait >= deadline:
            raise
    clock.sleep(wait)

    def out_of_time(state: tenacity.RetryCallState) -> bool:
        return clock.monotonic() + (state.upcoming_sleep or 0.0) >= deadline

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(retry_on),
        wait=lambda state: backoff(state.attempt_number + 1),  # attempt 1 of these is the call's second
        stop=out_of_time,
        sleep=clock.sleep,
        reraise=True,
    )
    return retrying(fn)
