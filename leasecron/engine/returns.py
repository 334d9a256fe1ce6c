"""Returns recorded late: a handler that returned after its run was lost, written on its attempt.

A runner cut off from its store after its handler did the whole work cannot
record the end: its local deadline passes and the run is *lost*, so the store
shows it ``interrupted`` or taken over, and nothing says the work was done.
When a live run's handler returned and its end was not recorded (the finish
never reached the store, the store refused it because another attempt holds
the run, or the handler returned only after the run was lost), the instance
records the return on its attempt instead (``Store.record_return``: when it
returned, on the store's clock as this instance estimated it, and with what
result), from the claim pool, retried with a doubling wait while the store
does not answer, for up to :data:`RECORD_FOR_S`. It changes nothing else of
the run: fencing stays as it is (``docs/guarantees.rst``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..events import SlotText, log
from ..runs import Run
from .roles import Instance

__all__ = ["Returns", "RECORD_FOR_S", "FIRST_WAIT_S", "MAX_WAIT_S"]

#: How long an instance keeps trying to record a lost run's return, in seconds.
RECORD_FOR_S = 600.0
#: The wait before the second try, in seconds; doubled after each try.
FIRST_WAIT_S = 0.5
#: The longest wait between two tries, in seconds.
MAX_WAIT_S = 30.0


@dataclasses.dataclass(frozen=True)
class _Return:
    """What to record: the run (its attempt and runner), when its handler returned and how."""

    run: Run
    returned_ms: int
    status: str
    error: Optional[str]
    until: float  # monotonic s: the last try starts before this


class Returns:
    """Records, on ``instance``'s store, the returns of handlers whose runs were lost."""

    def __init__(self, instance: Instance) -> None:
        self._instance = instance

    def record(self, run: Run, returned_ms: int, status: str, error: Optional[str]) -> None:
        """Record (soon, from the claim pool) that ``run``'s handler returned at ``returned_ms``
        with ``status`` (``success`` or ``failed``, and ``error``)."""
        until = self._instance.clock.monotonic() + RECORD_FOR_S
        self._instance.tasks.submit(self._try, _Return(run, returned_ms, status, error, until), FIRST_WAIT_S)

    def _try(self, late: _Return, wait_s: float) -> None:
        run = late.run
        ids = (run.job, SlotText(run.slot_ms), run.attempt, run.runner)
        try:
            recorded = self._instance.store.record_return(
                run.job, run.slot_ms, run.attempt, run.runner, late.returned_ms, late.status, late.error
            )
        except Exception as exc:  # noqa: BLE001 - tried again while it may still be recorded
            if self._instance.clock.monotonic() + wait_s > late.until:
                log.warning(
                    "leasecron: gave up recording the return of job %r slot %s attempt %d runner %r: %s", *ids, exc
                )
                return
            log.debug("leasecron: cannot record the return of job %r slot %s attempt %d runner %r yet: %s", *ids, exc)
            again = min(wait_s * 2, MAX_WAIT_S)
            self._instance.timers.call_later(wait_s * 1000, self._instance.tasks.submit, self._try, late, again)
            return
        log.info(
            "leasecron: recorded job %r slot %s attempt %d runner %r: its handler returned %s after the run was lost"
            " (recorded: %s)",
            *ids,
            late.status,
            recorded,
        )
