"""Retrying store calls, never past the time in which their answer matters.

A heartbeat is retried until its local lease deadline; a scheduled claim
until it would be late; a backup's check until its next check. Only
:class:`~leasecron.StoreUnavailable` (a failure worth retrying) is retried.
"""

from __future__ import annotations

import time
from typing import Callable, Tuple, Type, TypeVar

import tenacity

from .errors import StoreUnavailable

__all__ = ["call_until"]

T = TypeVar("T")


def call_until(
    fn: Callable[[], T],
    deadline: float,
    retry_on: Tuple[Type[BaseException], ...] = (StoreUnavailable,),
) -> T:
    """Call ``fn`` until it returns, retrying ``retry_on`` errors while the
    monotonic clock (seconds) has not reached ``deadline``; the last error
    is raised once it has.
    """

    def out_of_time(state: tenacity.RetryCallState) -> bool:
        return time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(retry_on),
        wait=tenacity.wait_exponential(multiplier=0.02, max=1.0) + tenacity.wait_random(0, 0.02),
        stop=out_of_time,
        reraise=True,
    )
    return retrying(fn)
