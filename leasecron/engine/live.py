"""A live run: the attempt this instance won, its handler's thread and the end it records.

The run thread calls the handler (its tries: :mod:`.tries`) and records the
end: ``finish(success)``, ``finish(failed)``, or ``release`` (a hand-over)
when it raised after ``stop()`` aborted its signal. A finish goes to the
store with the finishes of the runs that end at the same time
(:mod:`.finishes`), except for a run whose heartbeat loop had started, which
sends its own. Once the run has lasted ``heartbeat_ms``, its heartbeat loop
(:mod:`.heartbeats`) renews the lease until the *local deadline*: the
monotonic time the last confirmed renewal was sent, plus ``lease_ms`` less
``lease_margin_ms`` (so the runner gives up before the store's lease can end). A
renewal refused, or none confirmed by that deadline, makes the run *lost*:
the signal aborts, ``lost`` fires, and this instance never touches the run
again (``docs/design.rst``, "A live run"). The live runs' keeper
(:mod:`.live_runs`) acts on the run's times: the loop's start, the deadline,
the timeout.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Optional, Protocol, Tuple

from ..context import Context, Signal
from ..errors import Aborted
from ..events import SlotText, error_text, log
from ..jobs import Job
from ..runs import Run
from ..stores import Finish
from ..states import AbortReason, LiveState, LostCause, Status
from .finishes import End, Finishes, end_of
from .heartbeats import Heartbeats, held_text
from .returns import Returns
from .roles import Instance, Threads
from .store_calls import call_until
from .tries import Tries

__all__ = ["LiveRun", "RunSupport", "Registry"]

#: The states in which the run is still this instance's to renew, finish or lose.
_HOLDING = (LiveState.RUNNING, LiveState.FINISHING)


class Registry(Protocol):
    """Keeps the live runs of an instance (:class:`~leasecron.engine.live_runs.LiveRuns`)."""

    def ended(self, live: "LiveRun") -> None:
        """``live``'s threads are done with it: no thread of it touches the store any more."""

    def plan(self, due: float) -> None:
        """Have the keeper look at the live runs at the monotonic time ``due`` (or sooner)."""


@dataclasses.dataclass(frozen=True)
class RunSupport:
    """What a live run needs of the instance that won it: one for all its live runs."""

    #: The instance: its store (renewals, the finish), events and clock (the deadline and the
    #: heartbeats are on it).
    instance: Instance
    #: Run the handler and the heartbeat loop.
    workers: Threads
    #: Told when the run ended; its keeper acts on the runs' times (the heartbeat loop's start,
    #: the local deadline, the timeout).
    runs: Registry
    #: Sends the finishes of runs that end together in one round trip.
    finishes: "Finishes"
    #: Records the return of a handler whose run was lost, late, on its attempt.
    returns: "Returns"


class LiveRun:
    """One attempt this instance runs, made when a claim is won (sent at ``claim_sent``, on the
    monotonic clock of ``support``: the local deadline counts from it).

    A small object: its times are numbers that the live runs' keeper
    (:meth:`keep`, in the scheduler thread) acts on when they fall due, so a run
    that ends before its first heartbeat plans no timer and makes no event of
    its own; the heartbeat loop's two events exist once the loop starts.
    """

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
        #: True once no thread of this run touches the store any more.
        self.ended = False
        #: How the log names this run: job, slot, attempt, runner.
        self._ids = (run.job, SlotText(run.slot_ms), run.attempt, run.runner)
        now = support.instance.clock.monotonic()
        self._began = now
        self._lease_s = job.options.lease_ms / 1000
        #: How long a confirmed renewal (or the claim) holds the run here: the lease, less the margin.
        self._held_s = (job.options.lease_ms - job.options.lease_margin_ms) / 1000
        self._deadline = claim_sent + self._held_s
        #: When the first heartbeat is due (monotonic); the keeper starts the loop then.
        self._first_beat = now + job.options.heartbeat_ms / 1000
        #: When the attempt times out (monotonic), once the handler began and has a timeout_ms.
        self._timeout_at: Optional[float] = None
        self._state = LiveState.RUNNING
        self._lock = threading.Lock()
        self._beats_over = False  # no heartbeat loop starts any more
        self._beats: Optional[Heartbeats] = None  # the heartbeat loop, once started
        self._ending: Optional[End] = None  # decided once the handler returned
        self._returned_ms = 0  # when it returned, on the store's clock (estimated)

    @property
    def key(self) -> Tuple[str, int]:
        """(job, slot_ms): what the store knows this run by."""
        return (self.run.job, self.run.slot_ms)

    @property
    def _name(self) -> str:
        return f"{self.run.job}@{self.run.slot_ms}#{self.run.attempt}"

    def start(self) -> None:
        """Run the handler on a worker; the keeper starts the heartbeat loop after ``heartbeat_ms``."""
        self._support.workers.submit(f"leasecron-run-{self._name}", self._execute)

    def keep(self, now: float) -> Optional[float]:
        """In the scheduler thread, at the monotonic time ``now``: do what fell due (the local
        deadline, the first heartbeat, the timeout); when to look again, or None when never."""
        if self._state not in _HOLDING:
            return None
        if now >= self._deadline:
            self.lose(LostCause.UNRENEWED, f"the lease was not renewed for {held_text(self.job.options)}")
            return None
        due = self._deadline
        if self._beats is None and not self._beats_over:
            if now >= self._first_beat:
                self.start_beating()
            else:
                due = min(due, self._first_beat)
        timeout_at = self._timeout_at
        if timeout_at is not None:
            if now >= timeout_at:
                self._timeout_at = None
                self._at_timeout()
            else:
                due = min(due, timeout_at)
        return due

    def start_beating(self) -> None:
        """Hand the heartbeat loop to a worker (once; not after the run stopped beating)."""
        with self._lock:
            if self._beats is not None or self._beats_over:
                return
            beats = self._beats = Heartbeats(self._instance, self, self._first_beat)
        self._support.workers.submit(f"leasecron-heartbeat-{self._name}", beats.run)

    def _end_beats(self) -> Optional[threading.Event]:
        """No heartbeat loop starts any more, and a running one stops; the event set once it
        stopped (None when none ever started)."""
        with self._lock:
            self._beats_over = True
            beats = self._beats
        if beats is None:
            return None
        beats.stop.set()
        return beats.done

    # -- the run thread --------------------------------------------------------

    def _execute(self) -> None:
        self._began = self._instance.clock.monotonic()  # for the log, and the timeout: when the first try began
        timeout_ms = self.job.options.timeout_ms
        if timeout_ms is not None:
            self._timeout_at = self._began + timeout_ms / 1000
            self._support.runs.plan(self._timeout_at)
        error: Optional[BaseException] = None
        try:
            self._tries.run()
        except BaseException as exc:  # noqa: BLE001 - every handler failure is recorded
            error = exc
        self._returned_ms = self._instance.clock.now_ms()  # recorded late if the run is lost (.returns)
        with self._lock:
            self._returned = True  # a timeout due from now on finds the handler done: no abort
        together = False
        try:
            together = self._conclude(error)
        finally:
            if not together:
                self._end()

    def _end(self) -> None:
        """No thread of this run touches the store any more: a heartbeat still in flight is waited
        for (at most one lease), then the run is ``ended``."""
        beat_done = self._end_beats()
        if beat_done is not None:
            self._instance.clock.wait(beat_done, self._lease_s)
        self.ended = True
        self._support.runs.ended(self)

    def _conclude(self, error: Optional[BaseException]) -> bool:
        """Record the end the handler's outcome asks for: whether its finish went to be sent with
        others (:mod:`.finishes`; the run ends when its answer comes), else it was recorded here."""
        store, run = self._instance.store, self.run
        took = self._instance.clock.monotonic() - self._began
        timed_out = self.signal.reason == AbortReason.TIMEOUT  # whatever the handler did after the limit
        timed_out_ms = self.job.options.timeout_ms if timed_out else None
        with self._lock:
            state = self._state
            if state == LiveState.RUNNING:
                self._state = LiveState.FINISHING
        if state != LiveState.RUNNING:  # lost or abandoned: never touch the run again
            log.info(
                "leasecron: ended job %r slot %s attempt %d runner %r: the handler returned after the run was %s;"
                " the run is not finished (a lost run's attempt notes the return)",
                *self._ids,
                state,
            )
            if state == LiveState.LOST:  # but its attempt is told what the handler did
                self._ending = end_of(error, timed_out_ms, took)
                self._ended(False)
            return False
        if error is not None and self.signal.reason == AbortReason.STOP:
            log.debug("leasecron: handing over job %r slot %s attempt %d runner %r: %s", *self._ids, error_text(error))
            self._ending = End("handover", None, None, took)
            done = self._record_end(lambda: store.release(run.job, run.slot_ms, run.token), "released")
            self._end_beats()
            self._ended(done)
            return False
        ending = self._ending = end_of(error, timed_out_ms, took)
        if ending.event == Status.FAILED:
            log.error(
                "leasecron: failed job %r slot %s attempt %d runner %r after %.3f s: %s",
                *self._ids,
                took,
                ending.text,
                exc_info=None if timed_out or isinstance(error, Aborted) else error,
            )
        with self._lock:  # a run that never beat sends its finish with others; one that beat, alone
            together = self._beats is None
            self._beats_over = True
        if together:
            self._support.finishes.add(self)
            return True
        self._finish_here()
        return False

    # -- the finish (Finishing, for Finishes) ---------------------------------------------

    @property
    def finish(self) -> Finish:
        """The finish the handler's outcome asks for."""
        assert self._ending is not None
        run = self.run
        return Finish(run.job, run.slot_ms, run.token, self._ending.event, self._ending.text)

    @property
    def finishing(self) -> bool:
        """Whether the finish still matters (the run was not lost meanwhile)."""
        return self._state == LiveState.FINISHING

    def finished(self, recorded: bool) -> None:
        """The store's answer to the finish sent with others (the first try), False also when it
        was not sent (the run was lost meanwhile): act on it, and end."""
        if not recorded:
            self.lose(LostCause.FENCED, f"the store refused to record the end ({self.finish.status}): another"
                      " attempt holds the run")  # fmt: skip
        self._ended(recorded)
        self._end()

    def finish_alone(self) -> None:
        """The batch the finish went in failed: send it alone, retried until the local deadline, and end."""
        try:
            self._finish_here(tries=1)
        finally:
            self._end()

    def _finish_here(self, tries: int = 0) -> None:
        """Send the finish from this thread, after ``tries`` earlier tries, and act on the answer."""
        finish = self.finish
        done = self._record_end(lambda: self._instance.store.finish(*finish), finish.status, tries)
        self._end_beats()
        self._ended(done)

    def _ended(self, done: bool) -> None:
        """The end was recorded (``done``): log it and emit its event; or the run was lost after its
        handler returned: record the return on its attempt, late (:mod:`.returns`)."""
        ending = self._ending
        if ending is None:
            return
        if not done:
            if ending.event in (Status.SUCCESS, Status.FAILED) and self._state == LiveState.LOST:
                self._support.returns.record(self.run, self._returned_ms, ending.event, ending.text)
            return
        with self._lock:
            if self._state != LiveState.FINISHING:
                return
            self._state = LiveState.ENDED
        if ending.event == Status.SUCCESS:
            log.info("leasecron: succeeded job %r slot %s attempt %d runner %r in %.3f s", *self._ids, ending.took)
        elif ending.event == "handover":
            log.info(
                "leasecron: handed over job %r slot %s attempt %d runner %r after %.3f s: released on stop()"
                " for a backup",
                *self._ids,
                ending.took,
            )
        self._instance.events.emit_run(
            ending.event, self.run, error=ending.text, reason=ending.reason, try_number=self._tries.number
        )

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

    def _record_end(self, call: Callable[[], bool], status: str, tries: int = 0) -> bool:
        """Finish or release (after ``tries`` earlier tries); retried until the local deadline.
        False means the run is lost."""

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

    # -- what the heartbeat loop asks (Beating) ---------------------------------------

    @property
    def deadline(self) -> float:
        """The local deadline (monotonic s): the last confirmed renewal's sending, plus ``lease_ms``
        less ``lease_margin_ms``."""
        return self._deadline

    @property
    def state(self) -> LiveState:
        """The run's state here."""
        return self._state

    def renewed(self, sent: float) -> None:
        """A renewal sent at ``sent`` was confirmed: the deadline moves on (the keeper looks at
        the run at its old deadline, and finds the new one)."""
        with self._lock:
            self._deadline = max(self._deadline, sent + self._held_s)

    # -- transitions -----------------------------------------------------------------

    def lose(self, cause: LostCause, why: str) -> bool:
        """The run is no longer ours: abort the signal, emit ``lost`` (reason ``cause``:
        fenced or unrenewed; error ``why``), never touch it again."""
        with self._lock:
            if self._state not in _HOLDING:
                return False
            self._state = LiveState.LOST
        self._end_beats()
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
        self._end_beats()
        log.warning(
            "leasecron: abandoned job %r slot %s attempt %d runner %r: the handler still runs after the stop"
            " timeout; a backup takes the run over when its lease runs out",
            *self._ids,
        )
        return True
