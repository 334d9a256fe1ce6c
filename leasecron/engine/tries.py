"""The tries of one attempt: a handler called again when it raises, and the attempt's time limit.

Within one attempt (one lease), the instance may call the handler ``retries``
more times after a try that raised, each after a doubling wait with jitter
(:func:`retry_wait`), while the signal is not aborted; ``ctx.try_number``
counts the tries. ``timeout_ms`` counts from the first try: the live run
aborts the signal then (``docs/design.rst``, "Tries and the time limit").
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Optional, Protocol

import tenacity

from ..context import Context
from ..errors import Aborted
from .handlers import call_handler
from ..jobs import Job
from .clock import StoreClock

__all__ = ["Tries", "Retrying", "MAX_WAIT_S", "retry_wait", "timed_out_text"]

#: The longest wait between two tries, in seconds, however many tries came before.
MAX_WAIT_S = 60.0


class Retrying(Protocol):
    """Told of a failed try that another try follows (the live run: it logs it and emits ``retry``)."""

    def retrying(self, number: int, error: BaseException, wait_s: float) -> None:
        """Try ``number`` raised ``error``; the next one begins after ``wait_s`` seconds."""


def timed_out_text(timeout_ms: int) -> str:
    """The error a run that ran past its ``timeout_ms`` is recorded with."""
    return f"timed out after {timeout_ms} ms"


def retry_wait(retry_delay_ms: int) -> Callable[[tenacity.RetryCallState], float]:
    """The wait before try ``n + 1`` (tenacity's ``attempt_number`` n), in seconds:
    ``retry_delay_ms`` doubled ``n - 1`` times (tenacity's ``wait_exponential``), plus a random
    jitter of up to a quarter of ``retry_delay_ms``; at most :data:`MAX_WAIT_S`."""
    delay_s = retry_delay_ms / 1000
    doubling = tenacity.wait_exponential(multiplier=delay_s, exp_base=2, max=MAX_WAIT_S)

    def wait(state: tenacity.RetryCallState) -> float:
        return float(min(doubling(state) + random.uniform(0, delay_s / 4), MAX_WAIT_S))

    return wait


class Tries:
    """The tries of one attempt of ``job``: :meth:`run` calls the handler with ``context`` (a copy
    with its ``try_number``) until a try returns, the tries are used up or the signal is aborted.
    The waits between tries are on ``clock``; ``listener`` is told of each failed try another
    follows. ``number`` is the number of the last try that began (0 before the first)."""

    def __init__(
        self, job: Job, context: Context, clock: StoreClock, listener: Optional[Retrying] = None
    ) -> None:
        self.job = job
        self.context = context
        self.clock = clock
        self.listener = listener
        self.number = 0

    def run(self) -> None:
        """Call the handler, and again after each try that raised while tries are left and the
        signal is not aborted. Raises the error of the last try, or :class:`~leasecron.Aborted`
        when the signal cut a wait short."""
        options = self.job.options
        if options.retries == 0:
            self.number = 1
            call_handler(self.job.func, self.job.takes_context, self.context)
            return
        signal = self.context.signal

        def wait(seconds: float) -> None:
            self.clock.wait(signal, seconds)  # an abort (stop, lost, timeout) ends the wait at once

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(options.retries + 1),
            wait=retry_wait(options.retry_delay_ms),
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, Exception) and not signal.aborted),
            sleep=wait,
            before_sleep=self._before_wait,
            reraise=True,
        )
        for attempt in retrying:
            number = attempt.retry_state.attempt_number
            with attempt:
                if number > 1 and signal.aborted:
                    raise Aborted(f"run aborted ({signal.reason}) before try {number}")
                self.number = number
                context = dataclasses.replace(self.context, try_number=number)
                call_handler(self.job.func, self.job.takes_context, context)

    def _before_wait(self, state: tenacity.RetryCallState) -> None:
        if self.listener is not None and state.outcome is not None and state.next_action is not None:
            error = state.outcome.exception()
            assert error is not None  # only a try that raised is retried
            self.listener.retrying(state.attempt_number, error, state.next_action.sleep)
