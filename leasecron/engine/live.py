"""A live run: the attempt this instance won, its handler's thread and its heartbeat loop.

The run thread calls the handler (its tries: :mod:`.tries`) and records the
end: ``finish(success)``, ``finish(failed)``, or ``release`` (a hand-over)
when it raised after ``stop()`` aborted its signal. The heartbeat loop
starts once the run has lasted ``heartbeat_ms`` and renews the lease until
the *local deadline*: the monotonic time the last confirmed renewal was sent,
plus ``lease_ms``. A renewal refused, or none confirmed by that deadline,
makes the run *lost*: the signal aborts, ``lost`` fires, and this instance
never touches the run again (``docs/design.rst``, "A live run").
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Callable, Optional, Protocol, Tuple

from ..context import Context, Signal
from ..errors import Aborted
from ..events import SlotText, error_text, log
from ..jobs import Job
from ..runs import Run
from ..states import AbortReason, LiveState, LostCause, Status
from .roles import Instance, Threads
from .store_calls import call_until
from .tries import Tries, timed_out_text

__all__ = ["LiveRun", "RunSupport", "Registry"]

#: The states in which the run is still this instance's to renew, finish or lose.
_HOLDING = (LiveState.RUNNING, LiveState.FINISHING)


class Registry(Protocol):
    """Keeps the live runs of an instance (:class:`~leasecron.engine.live_runs.LiveRuns`)."""

    def ended(self, live: "LiveRun") -> None:
        """``live``'s threads are done with it: no thread of it touches the store any more."""


@dataclasses.dataclass(frozen=True)
class RunSupport:
    """What a live run needs of the instance that won it: one for all its live runs."""

    #: The instance: its store (renewals, the finish), timers (the heartbeat loop's start, the
    #: local deadline, the timeout), events and clock (the deadline and the heartbeats are on it).
    instance: Instance
    #: Run the handler and the heartbeat loop.
    workers: Threads
    #: Told when the run ended.
    runs: Registry


class LiveRun:
    """One attempt this instance runs, made when a claim is won (sent at ``claim_sent``, on the
    monotonic clock of ``support``: the local deadline counts from it)."""

    def __init__(self, support: RunSupport, job: Job, run: Run, claim_sent: float) -> None:
        self._support = support
        self._instance = support.instance
        self.job = job
        self.run = run
        self.signal = Signal()
        self.context = Context(
            job=run.job,
            slot=run.slot,
            slot_ms=run.slot_ms,
            attempt=run.attempt,
            token=run.token,
            runner=run.runner,
            reason=run.reason,
            signal=self.signal,
        )
        self._tries = Tries(job, self.context, support.instance.clock, self)
        self._returned = False  # the handler's last try returned or raised
        self.ended = threading.Event()
        #: How the log names this run: job, slot, attempt, runner.
        self._ids = (run.job, SlotText(run.slot_ms), run.attempt, run.runner)
        self._began = support.instance.clock.monotonic()
        self._lease_s = job.options.lease_ms / 1000
        self._deadline = claim_sent + self._lease_s
        self._state = LiveState.RUNNING
        self._lock = threading.Lock()
        self._stop_beating = threading.Event()
        #: When the first heartbeat is due (monotonic); the loop starts then.
        self._first_beat = support.instance.clock.monotonic() + job.options.heartbeat_ms / 1000
        self._beating = False  # the heartbeat loop was handed to a worker
        self._beat_done = threading.Event()
        self._name = f"{run.job}@{run.slot_ms}#{run.attempt}"

    @property
    def key(self) -> Tuple[str, int]:
        """(job, slot_ms): what the store knows this run by."""
        return (self.run.job, self.run.slot_ms)

    def start(self) -> None:
        """Run the handler on a worker; the heartbeat loop follows after ``heartbeat_ms``."""
        self._plan_local_deadline_check()
        self._instance.timers.call_at_monotonic(self._first_beat, self.start_beating)
        self._support.workers.submit(f"leasecron-run-{self._name}", self._execute)

    def start_beating(self) -> None:
        """Hand the heartbeat loop to a worker (once; not after the run stopped beating)."""
        with self._lock:
            if self._beating or self._stop_beating.is_set():
                return
            self._beating = True
        self._support.workers.submit(f"leasecron-heartbeat-{self._name}", self._beat)

    # -- the run thread --------------------------------------------------------

    def _execute(self) -> None:
        self._began = self._instance.clock.monotonic()  # for the log, and the timeout: when the first try began
        timeout_ms = self.job.options.timeout_ms
        if timeout_ms is not None:
            self._instance.timers.call_at_monotonic(self._began + timeout_ms / 1000, self._at_timeout)
        error: Optional[BaseException] = None
        try:
            self._tries.run()
        except BaseException as exc:  # noqa: BLE001 - every handler failure is recorded
            error = exc
        with self._lock:
            self._returned = True  # a timeout due from now on finds the handler done: no abort
        try:
            self._conclude(error)
        finally:
            # "ended" means no thread of this run touches the store any more: a
            # heartbeat still in flight is waited for (at most one lease).
            with self._lock:
                self._stop_beating.set()
                beating = self._beating
            if beating:
                self._instance.clock.wait(self._beat_done, self._lease_s)
            self.ended.set()
            self._support.runs.ended(self)

    def _conclude(self, error: Optional[BaseException]) -> None:
        with self._lock:
            if self._state != LiveState.RUNNING:  # lost or abandoned: never touch the run again
                log.info(
                    "leasecron: ended job %r slot %s attempt %d runner %r: the handler returned after the run was %s;"
                    " the store is not told",
                    *self._ids,
                    self._state,
                )
                return
            self._state = LiveState.FINISHING
        store, run = self._instance.store, self.run
        finish = functools.partial(store.finish, run.job, run.slot_ms, run.token)
        took = self._instance.clock.monotonic() - self._began
        timed_out = self.signal.reason == AbortReason.TIMEOUT  # whatever the handler did after the limit
        reason = AbortReason.TIMEOUT if timed_out else None
        if error is not None and self.signal.reason == AbortReason.STOP:
            log.debug("leasecron: handing over job %r slot %s attempt %d runner %r: %s", *self._ids, error_text(error))
            done = self._record_end(lambda: store.release(run.job, run.slot_ms, run.token), "released")
            event, text = "handover", None
        elif error is not None or timed_out:
            timeout_ms = self.job.options.timeout_ms
            if timed_out and timeout_ms is not None:
                text = timed_out_text(timeout_ms)
            else:
                assert error is not None
                text = error_text(error)
            log.error(
                "leasecron: failed job %r slot %s attempt %d runner %r after %.3f s: %s",
                *self._ids,
                took,
                text,
                exc_info=None if timed_out or isinstance(error, Aborted) else error,
            )
            done = self._record_end(lambda: finish(Status.FAILED, text), Status.FAILED)
            event = "failed"
        else:
            text = None
            done = self._record_end(lambda: finish(Status.SUCCESS), Status.SUCCESS)
            event = "success"
        self._stop_beating.set()
        if done:
            with self._lock:
                if self._state != LiveState.FINISHING:
                    return
                self._state = LiveState.ENDED
            if event == "success":
                log.info("leasecron: succeeded job %r slot %s attempt %d runner %r in %.3f s", *self._ids, took)
            elif event == "handover":
                log.info(
                    "leasecron: handed over job %r slot %s attempt %d runner %r after %.3f s: released on stop()"
                    " for a backup",
                    *self._ids,
                    took,
                )
            self._instance.events.emit_run(event, run, error=text, reason=reason, try_number=self._tries.number)

    def retrying(self, number: int, error: BaseException, wait_s: float) -> None:
        """A try failed and another follows after ``wait_s``: log it and emit ``retry``."""
        text = error_text(error)
        log.warning(
            "leasecron: retrying job %r slot %s attempt %d runner %r (try %d of %d failed; next in %.3f s): %s",
            *self._ids,
            number,
            self.job.options.retries + 1,
            wait_s,
            text,
            exc_info=error,
        )
        self._instance.events.emit_run("retry", self.run, error=text, try_number=number)

    def _at_timeout(self) -> None:
        """The attempt ran for ``timeout_ms``: abort the signal (reason ``"timeout"``) if the handler
        still runs. The lease stays renewed until it returns: no second runner starts meanwhile."""
        with self._lock:
            if self._state != LiveState.RUNNING or self._returned or not self.signal.abort(AbortReason.TIMEOUT):
                return
        log.warning(
            "leasecron: timed out job %r slot %s attempt %d runner %r: ran for timeout_ms (%d ms); the handler is"
            " asked to stop, and its lease is renewed until it returns",
            *self._ids,
            self.job.options.timeout_ms,
        )

    def _record_end(self, call: Callable[[], bool], status: str) -> bool:
        """Finish or release; retried until the local deadline. False means the run is lost."""
        tries = 0

        def once() -> bool:
            nonlocal tries
            tries += 1
            return call()

        try:
            if call_until(once, self._deadline, self._instance.clock):
                return True
        except Exception as exc:  # noqa: BLE001 - gave up: the lease cannot be trusted any longer
            why = f"could not record the end ({status}) before the lease ran out: {error_text(exc)}"
            self.lose(LostCause.UNRENEWED, why)
            return False
        if tries > 1 and status in (Status.SUCCESS, Status.FAILED):  # an earlier try may have landed
            stored = self._instance.store.get_run(self.run.job, self.run.slot_ms)
            if stored is not None and stored.token == self.run.token and stored.status == status:
                return True
        self.lose(LostCause.FENCED, f"the store refused to record the end ({status}): another attempt holds the run")
        return False

    # -- the heartbeat loop -------------------------------------------------------

    def _beat(self) -> None:
        try:
            self._beat_until_stopped()
        finally:
            self._beat_done.set()

    def _beat_until_stopped(self) -> None:
        store, run, clock = self._instance.store, self.run, self._instance.clock
        lease_ms = self.job.options.lease_ms
        wait_s = max(0.0, self._first_beat - clock.monotonic())
        while not clock.wait(self._stop_beating, wait_s):
            wait_s = self.job.options.heartbeat_ms / 1000
            sent = clock.monotonic()
            try:
                renewed = call_until(
                    lambda: store.heartbeat(run.job, run.slot_ms, run.token, lease_ms),
                    self._deadline,
                    clock,
                    retry_on=(Exception,),
                )
            except Exception as exc:  # noqa: BLE001 - judged by the deadline below
                if clock.monotonic() >= self._deadline:
                    why = f"the lease could not be renewed for lease_ms ({lease_ms} ms): {error_text(exc)}"
                    self.lose(LostCause.UNRENEWED, why)
                    return
                line = "leasecron: heartbeat failed job %r slot %s attempt %d runner %r (retrying): %s"
                log.warning(line, *self._ids, exc)
                continue
            if renewed and self._state == LiveState.LOST:
                self._release_stray_renewal()
                return
            if self._stop_beating.is_set():
                return
            if renewed:
                with self._lock:
                    self._deadline = max(self._deadline, sent + self._lease_s)
                line = "leasecron: heartbeat renewed job %r slot %s attempt %d runner %r: lease %d ms"
                log.debug(line, *self._ids, lease_ms)
                self._plan_local_deadline_check()
            elif self._state == LiveState.RUNNING:
                self.lose(LostCause.FENCED, "heartbeat refused: the run has another token now")
                return
            else:  # finishing: the run thread's finish decides
                return

    def _release_stray_renewal(self) -> None:
        """A heartbeat sent before the run was declared lost renewed it afterwards
        (a store call that hung past the deadline). The handler was aborted, so
        end that lease now rather than make a backup wait ``lease_ms`` for it."""
        run = self.run
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

    def _plan_local_deadline_check(self) -> None:
        """Have the timers check the local deadline when it comes (again after each renewal)."""
        self._instance.timers.call_at_monotonic(self._deadline, self._at_local_deadline)

    def _at_local_deadline(self) -> None:
        """At the local deadline: lost, unless a renewal moved the deadline on meanwhile."""
        if self._instance.clock.monotonic() >= self._deadline and self._state in _HOLDING:
            self.lose(LostCause.UNRENEWED, f"the lease was not renewed for lease_ms ({self.job.options.lease_ms} ms)")

    # -- transitions -----------------------------------------------------------------

    def lose(self, cause: LostCause, why: str) -> bool:
        """The run is no longer ours: abort the signal, emit ``lost`` (reason ``cause``:
        fenced or unrenewed; error ``why``), never touch it again."""
        with self._lock:
            if self._state not in _HOLDING:
                return False
            self._state = LiveState.LOST
        self._stop_beating.set()
        self.signal.abort(AbortReason.LOST)
        log.warning("leasecron: lost job %r slot %s attempt %d runner %r (%s): %s", *self._ids, cause, why)
        self._instance.events.emit_run("lost", self.run, reason=cause, error=why)
        return True

    def abandon(self) -> bool:
        """Stop renewing a run whose handler outlived the stop timeout."""
        with self._lock:
            if self._state != LiveState.RUNNING:
                return False
            self._state = LiveState.ABANDONED
        self._stop_beating.set()
        log.warning(
            "leasecron: abandoned job %r slot %s attempt %d runner %r: the handler still runs after the stop"
            " timeout; a backup takes the run over when its lease runs out",
            *self._ids,
        )
        return True
