"""The engine: one started session of a :class:`~leasecron.LeaseCron`, in threads.

* **one scheduler thread** (:mod:`leasecron.scheduler`) holds a heap of what is
  due on the store's clock: each job's next slot (plus its jitter), each
  backup's next check, each live run's lease deadline. It never waits on the
  store: it hands every store call to
* **the claim pool** (the backup pollers): a few threads that send claims —
  scheduled, catch-up and takeover — and act on the outcome;
* **for each live run a run thread, and a heartbeat loop once it has run for
  a heartbeat** (:mod:`leasecron.live`), on worker threads that are reused
  from run to run and exit when idle (:mod:`leasecron.workers`).

A claim's outcome decides what this instance does: ``won`` starts a live
run; ``running`` makes it a backup of the run, re-checked with a takeover
claim after a uniform random 1–2 heartbeats until the run ends or is won;
``overlap`` emits ``skip`` and watches both the earlier run and the new
slot; ``late`` and ``early`` emit ``skip`` (after ``early`` the clock is
re-read and the slot claimed again when it is due on the store's clock).

On start, each job is recovered (catch-up): its unfinished runs are watched
or taken over, and the latest slot, if it was due less than ``catch_up_ms``
ago, is claimed after a jitter with reason ``catch-up``. A store that cannot
be used at start (down, refusing the credentials) does not stop the instance:
the recovery, and the reading of the store's clock, are tried again with a
backoff (``BOOT_RETRY_MS``) until the store answers.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .clock import StoreClock
from .errors import StoreError, StoreUnavailable
from .events import ClaimText, Emitter, SlotText, log
from .jobs import Job
from .live import LiveRun, error_text
from .retry import call_until
from .runs import LATE_TOLERANCE_MS, Claim, Run
from .stores import Store
from .stores.rules import new_token
from .scheduler import Scheduler
from .states import AbortReason, Outcome, Reason
from .workers import Workers

__all__ = ["Engine"]

#: How often the store's clock is read again while running.
CLOCK_SYNC_MS = 60_000
#: How far a won claim may show the store's clock off the estimate before it is read again, in ms.
CLOCK_DRIFT_MS = 250
#: The least time between two such readings, in seconds.
DRIFT_RESYNC_GAP_S = 1.0
#: A claim for a slot further than this in the future (ms, on the estimate of the store's clock) is
#: not sent but planned for when the slot is due: it was chosen before the clock was read.
NOT_DUE_SLACK_MS = 100
#: How long stop() waits, once the live runs ended, for store calls in flight (claims, the
#: start-up's reads): a claim that wins after that is released at once, without a handler.
IN_FLIGHT_WAIT_S = 0.1
#: When the store does not answer at start: the first wait before the start-up
#: (clock, recovery of each job) is tried again, doubled after each failure up to the last.
BOOT_RETRY_MS = (500, 30_000)
#: The outcomes of a new claim that emit ``skip`` (the ``reason`` of the event).
_SKIPS = (Outcome.OVERLAP, Outcome.LATE, Outcome.EARLY)


class _Stopping(Exception):
    """A claim's retry found the engine stopping: it is dropped."""


class _NotDue(Exception):
    """A claim chosen by the host's clock is not due yet on the store's, read at last."""


class Engine:
    """The threads, live runs and watched runs of one ``start()`` … ``stop()``."""

    def __init__(self, store: Store, runner: str, emitter: Emitter, clock: StoreClock, claim_threads: int) -> None:
        self.store = store
        self.runner = runner
        self.clock = clock
        self._emitter = emitter
        self._lock = threading.RLock()
        self._stopping = False
        self._drift_synced = float("-inf")  # when a won claim last made the store's clock be read again
        self._stopped = threading.Event()
        #: Set to cut a stop short (a second signal): live handlers are abandoned.
        self.cold = threading.Event()
        self._live: Dict[Tuple[str, int], LiveRun] = {}
        self._watching: Set[Tuple[str, int]] = set()
        self._pending: Set["Future[Any]"] = set()
        self._timers = Scheduler(clock, self._on_task_error)
        self._pool = ThreadPoolExecutor(claim_threads, thread_name_prefix="leasecron-claims")
        #: The threads of the live runs: their handlers and heartbeat loops.
        self.workers = Workers()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, jobs: List[Job]) -> None:
        """Start the scheduler thread; the jobs are booted from the claim pool."""
        self._timers.start()
        self._submit(self._boot, jobs)

    def add(self, job: Job) -> None:
        """Schedule a job registered while running."""
        self._timers.call_at(0, self._boot_job, job)

    def live_runs(self) -> List[Run]:
        """The runs executing now."""
        with self._lock:
            return [live.run for live in self._live.values()]

    def stop(self, wait_s: float) -> None:
        """Abort every live run (reason ``"stop"``), wait up to ``wait_s`` for the
        handlers, then at most :data:`IN_FLIGHT_WAIT_S` for store calls in flight,
        and abandon what still runs. A second call waits for the first to finish."""
        with self._lock:
            first = not self._stopping
            self._stopping = True
            live = list(self._live.values())
            self._watching.clear()
        if not first:
            self._stopped.wait()
            return
        deadline = time.monotonic() + wait_s
        log.info("leasecron: stopping runner %r: %d live run(s)", self.runner, len(live))
        # The scheduler thread runs on while the handlers wind down: it starts their heartbeat
        # loops and declares lost a run whose store stopped answering, at its local deadline.
        # Nothing new is claimed: every claim goes through _submit, which refuses while stopping.
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()
        for run in live:
            run.signal.abort(AbortReason.STOP)
        self._wait_until(lambda: all(r.ended.is_set() for r in live), deadline)
        # A claim in flight that wins is handed straight back (_start_run), also after stop()
        # returned; a start-up still waiting on a store that never answered is simply left.
        self._wait_until(lambda: all(f.done() for f in pending), min(deadline, time.monotonic() + IN_FLIGHT_WAIT_S))
        self._timers.stop(timeout=1.0)
        with self._lock:
            leftovers = list(self._live.values())
        for run in leftovers:
            run.abandon()
        self._pool.shutdown(wait=False)
        self.workers.close()
        self._stopped.set()
        log.info("leasecron: stopped runner %r", self.runner)

    def _wait_until(self, condition: Callable[[], bool], deadline: float) -> None:
        """Wait until ``condition()``, the monotonic ``deadline``, or a cold stop."""
        while not condition() and not self.cold.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.cold.wait(min(left, 0.02))

    # -- the schedule ----------------------------------------------------------------------

    def _boot(self, jobs: List[Job]) -> None:
        synced = self._sync_clock()
        for job in jobs:
            self._boot_job(job)
        if synced:
            self._timers.call_later(CLOCK_SYNC_MS, self._submit, self._resync_clock)
        else:  # the store did not answer: until it does, the host's clock stands in for its clock
            self._timers.call_later(BOOT_RETRY_MS[0], self._submit, self._resync_clock, BOOT_RETRY_MS[0])

    def _boot_job(self, job: Job) -> None:
        slot = job.schedule.next_after(self.clock.now_ms())
        self._timers.call_at(slot + self._jitter(job), self._fire, job, slot)
        self._submit(self._recover, job)

    def _recover(self, job: Job, retry_ms: int = BOOT_RETRY_MS[0]) -> None:
        """Catch-up on start; tried again, with backoff, until the store answers."""
        try:
            self._recover_once(job)
        except StoreError as exc:  # the store is down (or refuses us) at start: never give up on the job
            log.warning(
                "leasecron: cannot recover job %r on start, runner %r: the store %s (%s); trying again in %.1f s",
                job.name,
                self.runner,
                "is unreachable" if isinstance(exc, StoreUnavailable) else "failed",
                exc,
                retry_ms / 1000,
            )
            self._emitter.emit("error", job.name, None, error=error_text(exc))
            self._timers.call_later(retry_ms, self._submit, self._recover, job, min(2 * retry_ms, BOOT_RETRY_MS[1]))

    def _fire(self, job: Job, slot_ms: int) -> None:
        """In the scheduler thread, at ``slot_ms`` + jitter: claim it, and plan the next slot."""
        self._submit(self._claim, job, slot_ms, Reason.SCHEDULE)
        following = job.schedule.next_after(slot_ms)
        latest = job.schedule.at_or_before(self.clock.now_ms())
        if latest is not None and latest > following:  # the process stalled: only the latest slot counts
            following = latest
        self._timers.call_at(following + self._jitter(job), self._fire, job, following)

    def _recover_once(self, job: Job) -> None:
        """Catch-up on start: unfinished runs first, then the missed latest slot."""
        now = self.clock.now_ms()
        latest = job.schedule.at_or_before(now)
        claimed_latest = False
        unfinished = call_until(
            lambda: self.store.unfinished(job.name), time.monotonic() + 2 * job.options.heartbeat_ms / 1000
        )
        for run in unfinished:
            claimed_latest = claimed_latest or run.slot_ms == latest
            if run.lease_alive(now):
                self._watch(job, run.slot_ms)  # lease alive: a backup of it
            elif latest is None or run.slot_ms >= latest:
                self._watch(job, run.slot_ms, delay_ms=0)  # expired, still the latest: claim the next attempt now
            # else expired with a newer slot due: leave it; the next run replaces it
        catch_up = job.options.catch_up_ms
        if latest is not None and not claimed_latest and catch_up > 0 and now - latest < catch_up:
            self._timers.call_later(self._jitter(job), self._submit, self._claim, job, latest, Reason.CATCH_UP)

    def _claim(self, job: Job, slot_ms: int, reason: Reason) -> Optional[Claim]:
        """Send one claim (retried while its answer matters) and act on the outcome."""
        if self._stopping:
            return None
        opts = job.options
        max_late = opts.catch_up_ms if reason == Reason.CATCH_UP else opts.max_late_ms
        if reason == Reason.TAKEOVER:
            matters_s = opts.heartbeat_ms / 1000
        else:
            matters_s = (slot_ms + max_late + LATE_TOLERANCE_MS - self.clock.now_ms()) / 1000
        first = sent = time.monotonic()
        ids = (job.name, SlotText(slot_ms), self.runner)  # how the log names this claim
        # One token for every try: a try whose answer was lost may have won; the next try, with
        # the same token and runner, then wins that same attempt again (with a renewed lease)
        # instead of finding it running and leaving it to a backup as a dead runner's.
        token = new_token()

        def once() -> Claim:
            nonlocal sent
            if self._stopping:  # a retry after stop(): give up quietly, do not keep calling the store
                raise _Stopping()
            if not self.clock.synced:
                # the store was unreachable at start: the slot was chosen by the host's clock, which
                # may be skewed. Read the store's first; claim only a slot that is due on it.
                self.clock.sync()
            if slot_ms > self.clock.now_ms() + NOT_DUE_SLACK_MS:  # chosen before a (re)sync moved the clock
                raise _NotDue()
            sent = time.monotonic()  # the try that wins starts the lease: the local deadline counts from it
            return self.store.claim(
                job.name,
                slot_ms,
                runner=self.runner,
                reason=reason,
                lease_ms=opts.lease_ms,
                max_attempts=opts.max_attempts,
                max_late_ms=max_late,
                overlap=opts.overlap,
                history_size=opts.history_size,
                token=token,
            )

        try:
            claim = call_until(once, first + max(matters_s, 0.0))
        except _Stopping:
            return None
        except _NotDue:
            log.info("leasecron: deferred job %r slot %s runner %r (%s): not due on the store's clock", *ids, reason)
            self._timers.call_at(slot_ms + self._jitter(job), self._submit, self._claim, job, slot_ms, reason)
            return None
        except Exception as exc:  # noqa: BLE001 - reported; the next slot or check tries again
            log.error("leasecron: claim failed job %r slot %s runner %r (%s): %s", *ids, reason, exc)
            self._emitter.emit("error", job.name, slot_ms, reason=reason, error=error_text(exc))
            return None
        answered = time.monotonic()
        outcome = claim.outcome
        answer = ClaimText(claim, self.clock.now_ms, max_late)
        if reason == Reason.TAKEOVER:
            log.debug("leasecron: backup check job %r slot %s runner %r: %s", *ids, answer)
        elif outcome not in _SKIPS and outcome != Outcome.WON:  # these have lines of their own
            log.debug("leasecron: claimed job %r slot %s runner %r (%s): %s", *ids, reason, answer)
        if outcome == Outcome.WON:
            assert claim.run is not None
            self._start_run(job, claim.run, sent)
            self._check_drift(claim.run.lease_end_ms - opts.lease_ms, sent, answered)
        elif outcome == Outcome.RUNNING:
            self._watch(job, slot_ms)
        elif outcome in _SKIPS:
            log.info("leasecron: skipped job %r slot %s runner %r (%s): %s", *ids, outcome, answer)
            self._emitter.emit("skip", job.name, slot_ms, reason=outcome, run=claim.run)
            if outcome == Outcome.OVERLAP and claim.run is not None:
                self._watch(job, claim.run.slot_ms)
                self._watch(job, slot_ms)
            elif outcome == Outcome.EARLY:
                # our estimate of the store's clock runs ahead (its clock stepped back): re-read
                # it, and claim the slot again when it is due on the store's clock
                self._sync_clock()
                due = max(slot_ms + self._jitter(job), self.clock.now_ms() + opts.heartbeat_ms)
                self._timers.call_at(due, self._submit, self._claim, job, slot_ms, reason)
        return claim

    # -- backups -------------------------------------------------------------------------

    def _watch(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        """Become a backup of the run at ``slot_ms`` (idempotent)."""
        key = (job.name, slot_ms)
        with self._lock:
            if self._stopping or key in self._watching or key in self._live:
                return
            self._watching.add(key)
        self._plan_check(job, slot_ms, delay_ms)

    def _plan_check(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        if delay_ms is None:
            delay_ms = random.uniform(1, 2) * job.options.heartbeat_ms
        self._timers.call_later(delay_ms, self._submit, self._check, job, slot_ms)

    def _check(self, job: Job, slot_ms: int) -> None:
        """A backup's check: a takeover claim; keep watching while the run may need us."""
        key = (job.name, slot_ms)
        with self._lock:
            if key not in self._watching:
                return
        claim = self._claim(job, slot_ms, Reason.TAKEOVER)
        if claim is None:
            keep = True
        elif claim.outcome == Outcome.RUNNING:
            with self._lock:
                keep = claim.run is not None and all(live.run.token != claim.run.token for live in self._live.values())
        elif claim.outcome == Outcome.NONE:  # nobody claimed the slot yet; it may still be claimed
            keep = self.clock.now_ms() <= slot_ms + job.options.max_late_ms + LATE_TOLERANCE_MS
        else:
            keep = False
        with self._lock:
            if keep and key in self._watching and not self._stopping:
                self._plan_check(job, slot_ms)
            else:
                self._watching.discard(key)

    # -- live runs ---------------------------------------------------------------------------

    def _start_run(self, job: Job, run: Run, claim_sent: float) -> None:
        ids = (run.job, SlotText(run.slot_ms), run.attempt, run.runner, run.reason)
        with self._lock:
            stopping = self._stopping
            if not stopping:
                live = LiveRun(self, job, run, claim_sent)
                self._live[live.key] = live
                self._watching.discard(live.key)
        if stopping:  # won while stopping: hand it straight back, it costs no attempt
            log.info("leasecron: won job %r slot %s attempt %d runner %r (%s) while stopping: releasing it", *ids)
            try:
                self.store.release(run.job, run.slot_ms, run.token)
            except Exception as exc:  # noqa: BLE001 - a backup takes it over when the lease runs out
                log.warning("leasecron: could not release job %r slot %s attempt %d runner %r (%s): %s", *ids, exc)
            return
        if run.reason == Reason.TAKEOVER:
            log.info("leasecron: took over job %r slot %s attempt %d runner %r (%s)", *ids)
        else:
            log.info("leasecron: won job %r slot %s attempt %d runner %r (%s)", *ids)
        self.emit("start", run, reason=run.reason)
        live.start()

    def run_ended(self, live: LiveRun) -> None:
        """A live run's threads are done with it."""
        with self._lock:
            if self._live.get(live.key) is live:
                del self._live[live.key]

    def emit(self, name: str, run: Run, *, reason: Optional[str] = None, error: Optional[str] = None) -> None:
        """Emit an event about ``run``."""
        self._emitter.emit(name, run.job, run.slot_ms, attempt=run.attempt, reason=reason, error=error, run=run)

    def call_at_monotonic(self, mono_s: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` in the scheduler thread at the host's monotonic time ``mono_s``
        (whatever a correction of the store clock's estimate does meanwhile)."""
        self._timers.call_at_monotonic(mono_s, fn, *args)

    # -- plumbing ------------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the claim pool; a failure is logged and emitted as ``error``."""
        with self._lock:
            if self._stopping:
                return
            try:
                future = self._pool.submit(self._guarded, fn, *args)
            except RuntimeError:  # the interpreter is shutting down
                return
            self._pending.add(future)
        future.add_done_callback(self._forget_future)

    def _forget_future(self, future: "Future[Any]") -> None:
        with self._lock:
            self._pending.discard(future)

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - reported, the pool lives on
            log.exception("leasecron: task %s failed", getattr(fn, "__name__", fn))
            self._on_task_error(exc)

    def _on_task_error(self, exc: BaseException) -> None:
        self._emitter.emit("error", None, None, error=error_text(exc))

    def _jitter(self, job: Job) -> float:
        return random.uniform(0, job.options.jitter_ms)

    def _sync_clock(self) -> bool:
        """Measure the store's clock; False (logged) when the store did not answer."""
        try:
            self.clock.sync()
        except Exception as exc:  # noqa: BLE001 - keep the last estimate; tried again later
            log.warning("leasecron: cannot read the store's clock, runner %r: %s", self.runner, exc)
            self._emitter.emit("error", None, None, error=error_text(exc))
            return False
        log.debug(
            "leasecron: store clock read runner %r: offset %.1f ms, round trip %.2f ms",
            self.runner,
            self.clock.offset_ms,
            self.clock.round_trip_ms or 0.0,
        )
        return True

    def _check_drift(self, store_ms: int, sent: float, answered: float) -> None:
        """Read the store's clock again when a won claim shows it elsewhere than estimated
        (its clock stepped): at most once per :data:`DRIFT_RESYNC_GAP_S`."""
        drift = self.clock.drift_ms(store_ms, sent, answered)
        if abs(drift) <= CLOCK_DRIFT_MS:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._drift_synced < DRIFT_RESYNC_GAP_S:
                return
            self._drift_synced = now
        log.warning("leasecron: store clock moved, runner %r: %+.0f ms off the estimate; re-read", self.runner, drift)
        self._sync_clock()

    def _resync_clock(self, retry_ms: Optional[int] = None) -> None:
        """Read the store's clock again: every minute, or sooner (with backoff) while it never answered."""
        if self._sync_clock() or retry_ms is None:
            self._timers.call_later(CLOCK_SYNC_MS, self._submit, self._resync_clock)
        else:
            self._timers.call_later(retry_ms, self._submit, self._resync_clock, min(2 * retry_ms, BOOT_RETRY_MS[1]))
