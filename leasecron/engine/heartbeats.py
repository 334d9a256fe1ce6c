"""The heartbeat loop of a live run: renewals of its lease, every ``heartbeat_ms``, until the run ends.

The loop is made only once a run has lasted ``heartbeat_ms`` (the live runs'
keeper starts it), so a run shorter than that makes none. Each renewal is
retried, whatever the error, until the run's local deadline; a confirmed one
moves that deadline on (:meth:`Beating.renewed`). A refused renewal means
another attempt holds the run (it is *lost*, fenced); none confirmed by the
deadline means the lease may have ended (lost, unrenewed). A renewal that
lands after the run was declared lost is released at once, so a backup need
not wait a lease for it (``docs/design.rst``, "A live run").
"""

from __future__ import annotations

import threading
from typing import Protocol, Tuple

from ..events import SlotText, error_text, log
from ..jobs import Job
from ..options import JobOptions
from ..runs import Run
from ..states import LiveState, LostCause
from .roles import Instance
from .store_calls import call_until

__all__ = ["Heartbeats", "Beating", "held_text"]


def held_text(options: JobOptions) -> str:
    """How long a runner holds its run without a confirmed renewal, as a lost run's error says it:
    ``lease_ms (3000 ms) less lease_margin_ms (300 ms)``."""
    return f"lease_ms ({options.lease_ms} ms) less lease_margin_ms ({options.lease_margin_ms} ms)"


class Beating(Protocol):
    """The live run a heartbeat loop renews (:class:`~leasecron.engine.live.LiveRun`)."""

    job: Job
    run: Run

    @property
    def deadline(self) -> float:
        """The local deadline (monotonic s): the last confirmed renewal's sending, plus ``lease_ms``
        less ``lease_margin_ms``."""

    @property
    def state(self) -> LiveState:
        """The run's state here."""

    def renewed(self, sent: float) -> None:
        """A renewal sent at the monotonic time ``sent`` was confirmed: the deadline moves on."""

    def lose(self, cause: LostCause, why: str) -> bool:
        """The run is no longer ours."""


class Heartbeats:
    """The heartbeat loop of ``live`` on ``instance``'s store, first renewal at the monotonic
    ``first_s``; :meth:`run` on a worker, until :attr:`stop` is set. :attr:`done` is set once it
    returned: no renewal of it is in flight any more."""

    def __init__(self, instance: Instance, live: Beating, first_s: float) -> None:
        self._instance = instance
        self._live = live
        self._first_s = first_s
        run = live.run
        self._ids: Tuple[str, SlotText, int, str] = (run.job, SlotText(run.slot_ms), run.attempt, run.runner)
        #: Set: the loop stops (the run ended, or is lost).
        self.stop = threading.Event()
        #: Set: the loop returned.
        self.done = threading.Event()

    def run(self) -> None:
        """Renew the lease until :attr:`stop` (a worker's task)."""
        try:
            self._beat_until_stopped()
        finally:
            self.done.set()

    def _beat_until_stopped(self) -> None:
        live, stop = self._live, self.stop
        store, run, clock = self._instance.store, live.run, self._instance.clock
        lease_ms = live.job.options.lease_ms
        wait_s = max(0.0, self._first_s - clock.monotonic())
        while not clock.wait(stop, wait_s):
            wait_s = live.job.options.heartbeat_ms / 1000
            sent = clock.monotonic()
            try:
                renewed = call_until(
                    lambda: store.heartbeat(run.job, run.slot_ms, run.token, lease_ms),
                    live.deadline,
                    clock,
                    retry_on=(Exception,),
                )
            except Exception as exc:  # noqa: BLE001 - judged by the deadline below
                if clock.monotonic() >= live.deadline:
                    why = f"the lease could not be renewed for {held_text(live.job.options)}: {error_text(exc)}"
                    live.lose(LostCause.UNRENEWED, why)
                    return
                line = "leasecron: heartbeat failed job %r slot %s attempt %d runner %r (retrying): %s"
                log.warning(line, *self._ids, exc)
                continue
            if renewed and live.state == LiveState.LOST:
                self._release_stray_renewal()
                return
            if stop.is_set():
                return
            if renewed:
                live.renewed(sent)
                line = "leasecron: heartbeat renewed job %r slot %s attempt %d runner %r: lease %d ms"
                log.debug(line, *self._ids, lease_ms)
            elif live.state == LiveState.RUNNING:
                live.lose(LostCause.FENCED, "heartbeat refused: the run has another token now")
                return
            else:  # finishing: the run thread's finish decides
                return

    def _release_stray_renewal(self) -> None:
        """A heartbeat sent before the run was declared lost renewed it afterwards
        (a store call that hung past the deadline). The handler was aborted, so
        end that lease now rather than make a backup wait ``lease_ms`` for it."""
        run = self._live.run
        try:
            released = self._instance.store.release(run.job, run.slot_ms, run.token)
        except Exception as exc:  # noqa: BLE001 - the lease then runs out on its own
            line = "leasecron: stray renewal not released job %r slot %s attempt %d runner %r: %s"
            log.warning(line, *self._ids, exc)
            return
        log.info(
            "leasecron: stray renewal released job %r slot %s attempt %d runner %r: a late heartbeat renewed the lost"
            " run (released: %s)",
            *self._ids,
            released,
        )
