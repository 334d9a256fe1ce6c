"""The engine: one started session of a :class:`~leasecron.LeaseCron`, in threads.

* **one scheduler thread** (:mod:`leasecron.engine.scheduler`) holds a heap of what is
  due on the store's clock: each job's next slot (plus its jitter), each
  backup's next check, each live run's lease deadline. It never waits on the
  store: it hands every store call to
* **the claim pool** (the backup pollers): a few threads that send claims —
  scheduled, catch-up, takeover and manual (:mod:`leasecron.engine.claims`) — and
  act on the outcome, and
  poll the store for requests of manual runs every ``poll_ms``
  (:mod:`leasecron.engine.polling`);
* **for each live run a run thread, and a heartbeat loop once it has run for
  a heartbeat** (:mod:`leasecron.engine.live`), on worker threads that are reused
  from run to run and exit when idle (:mod:`leasecron.engine.workers`).

Claims are sent, gathered into batches where many fall due at once, and acted
on in :mod:`leasecron.engine.claims`: ``won`` starts a live run here, ``running`` makes
this instance a backup of the run (:mod:`leasecron.engine.backups`), re-checked with a
takeover claim until the run ends or is won. ``remove(job)`` stops all of it
for a job; its live runs end as usual.

On start, each job is recovered (catch-up, :mod:`leasecron.engine.catch_up`): its
unfinished runs are backed up or taken over, and the latest slot, if it was
due less than ``catch_up_ms`` ago, is claimed after a jitter with reason
``catch-up``. A store that cannot be used at start (down, refusing the
credentials) does not stop the instance: the recovery, and the reading of
the store's clock (:class:`~leasecron.engine.clock.ClockSync`), are tried again
with a backoff (``BOOT_RETRY_MS``) until the store answers.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Tuple

from .clock import ClockSync, StoreClock
from ..controls import ManualRequest
from ..errors import StoreError, StoreUnavailable
from ..events import Emitter, SlotText, error_text, log
from ..jobs import Job
from .backups import Backups
from .catch_up import recover
from .live import LiveRun, RunSupport
from .polling import RequestPoller
from .claims import Claims
from .claim_pool import ClaimPool
from ..runs import Run
from .scheduler import Scheduler
from ..states import AbortReason, Reason
from ..stores import Store
from .workers import Workers

__all__ = ["Engine"]

#: How long stop() waits, once the live runs ended, for store calls in flight (claims, the
#: start-up's reads): a claim that wins after that is released at once, without a handler.
IN_FLIGHT_WAIT_S = 0.1
#: When the store does not answer at start: the first wait before the start-up
#: (clock, recovery of each job) is tried again, doubled after each failure up to the last.
BOOT_RETRY_MS = (500, 30_000)


class Engine:
    """The threads, live runs and backed-up runs of one ``start()`` … ``stop()``.

    ``scheduler`` (default: a :class:`~leasecron.engine.scheduler.Scheduler` on
    ``clock``), ``workers`` (default: :class:`~leasecron.engine.workers.Workers`)
    and ``claims`` (default: ``claim_threads`` threads, the claim pool's
    executor) are the engine's from then on: :meth:`stop` stops them. Every
    time is read through ``clock``. So a test can drive an engine in one
    thread, without waiting: a clock of its own, a scheduler it steps
    (:meth:`~leasecron.engine.scheduler.Scheduler.run_due`) after :meth:`boot`,
    and workers and an executor that run each task at once. ``poll_ms``:
    how often it asks the store for requests of manual runs.
    """

    def __init__(
        self,
        store: Store,
        runner: str,
        emitter: Emitter,
        clock: StoreClock,
        *,
        claim_threads: int = 4,
        poll_ms: int = 1_000,
        scheduler: Optional[Scheduler] = None,
        workers: Optional[Workers] = None,
        claims: Optional[Executor] = None,
    ) -> None:
        self.runner = runner
        self.clock = clock
        self._store = store
        self._emitter = emitter
        self._lock = threading.RLock()
        self._stopping = False
        self._stopped = threading.Event()
        #: Set to cut a stop short (a second signal): live handlers are abandoned.
        self.cold = threading.Event()
        self._live: Dict[Tuple[str, int], LiveRun] = {}
        #: The jobs scheduled here, by name: a task of a job that is not (``remove``) is dropped.
        self._jobs: Dict[str, Job] = {}
        self._scheduler = scheduler or Scheduler(clock, self._on_task_error)
        self._workers = workers or Workers()
        claims = claims or ThreadPoolExecutor(claim_threads, thread_name_prefix="leasecron-claims")
        self._pool = ClaimPool(claims, self._on_task_error)
        self._clock_sync = ClockSync(clock, runner, self._on_task_error, BOOT_RETRY_MS)
        self._support = RunSupport(  # what the live runs need, and nothing more
            store=store,
            timers=self._scheduler,
            workers=self._workers,
            emit=emitter.emit_run,
            monotonic=clock.monotonic,
            ended=self._run_ended,
        )
        self._backups = Backups(
            self._lock, later=self._scheduler.call_later, submit=self._pool.submit,
            check=lambda job, slot_ms: self._claims.claim(job, slot_ms, Reason.TAKEOVER),
            may_watch=self._may_back_up, holds=self._holds, now_ms=clock.now_ms,
        )  # fmt: skip
        self._claims = Claims(
            store, runner, clock=clock, clock_sync=self._clock_sync, emitter=emitter, scheduler=self._scheduler,
            pool=self._pool, may_claim=lambda job: not self._stopping and self._active(job),
            stopping=lambda: self._stopping, start_run=self._start_run, watch=self._backups.watch,
            forget_before=self._backups.forget_before, jitter=self._jitter, threads=claim_threads,
        )  # fmt: skip
        self._poller = RequestPoller(
            store, runner, poll_ms, timers=self._scheduler, monotonic=clock.monotonic, submit=self._pool.submit,
            jobs=self._jobs.get, claim=self._claims.claim, watch=self._backups.watch, on_error=self._on_task_error,
        )  # fmt: skip

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, jobs: List[Job]) -> None:
        """Start the scheduler thread, and :meth:`boot` the jobs."""
        self._scheduler.start()
        self.boot(jobs)

    def boot(self, jobs: List[Job]) -> None:
        """From the claim pool: read the store's clock, plan each job's next slot and recover it
        (catch-up). :meth:`start` without the scheduler thread, for an owner that steps it."""
        with self._lock:
            self._jobs.update((job.name, job) for job in jobs)
        self._pool.submit(self._boot, jobs)

    def add(self, job: Job) -> None:
        """Schedule a job registered while running."""
        with self._lock:
            self._jobs[job.name] = job
        self._scheduler.call_at(0, self._boot_job, job)

    def remove(self, job: Job) -> None:
        """Stop scheduling ``job``: its slots, catch-up, backups and manual runs; its live runs go on.
        A job registered again under its name since (another :class:`Job`) is left alone."""
        with self._lock:
            if self._jobs.get(job.name) is job:
                del self._jobs[job.name]
                self._backups.forget_job(job.name)

    def offer(self, job: Job, request: ManualRequest) -> None:
        """Claim a request for a manual run of ``job`` that this instance made, without waiting to poll."""
        if self._active(job):
            self._poller.offer(job, request)

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
            self._backups.clear()
            # nothing new is claimed: every claim goes through the claim pool, closed now
            pending = self._pool.close() if first else []
        if not first:
            self._stopped.wait()
            return
        deadline = time.monotonic() + wait_s
        log.info("leasecron: stopping runner %r: %d live run(s)", self.runner, len(live))
        # The scheduler thread runs on while the handlers wind down: it starts their heartbeat
        # loops and declares lost a run whose store stopped answering, at its local deadline.
        for future in pending:
            future.cancel()
        for run in live:
            run.signal.abort(AbortReason.STOP)
        self._wait_until(lambda: all(r.ended.is_set() for r in live), deadline)
        # A claim in flight that wins is handed straight back (_start_run), also after stop()
        # returned; a start-up still waiting on a store that never answered is simply left.
        self._wait_until(lambda: all(f.done() for f in pending), min(deadline, time.monotonic() + IN_FLIGHT_WAIT_S))
        self._scheduler.stop(timeout=1.0)
        with self._lock:
            leftovers = list(self._live.values())
        for run in leftovers:
            run.abandon()
        self._pool.shutdown()
        self._workers.close()
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
        # when the store does not answer, the host's clock stands in for its clock until it does
        wait_ms = self._clock_sync.at_start()
        for job in jobs:
            self._boot_job(job)
        self._scheduler.call_later(wait_ms, self._pool.submit, self._resync_clock)
        self._poller.start()

    def _boot_job(self, job: Job) -> None:
        if not self._active(job):
            return
        slot = job.schedule.next_after(self.clock.now_ms())
        self._scheduler.call_at(slot + self._jitter(job), self._fire, job, slot)
        self._pool.submit(self._recover, job)

    def _recover(self, job: Job, retry_ms: int = BOOT_RETRY_MS[0]) -> None:
        """Catch-up on start; tried again, with backoff, until the store answers."""
        if not self._active(job):
            return
        try:
            recover(job, self._store, self.clock, watch=self._backups.watch, catch_up=self._catch_up)
        except StoreError as exc:  # the store is down (or refuses us) at start: never give up on the job
            why = "is unreachable" if isinstance(exc, StoreUnavailable) else "failed"
            line = "leasecron: cannot recover job %r on start, runner %r: the store %s (%s); trying again in %.1f s"
            log.warning(line, job.name, self.runner, why, exc, retry_ms / 1000)
            self._emitter.emit("error", job.name, None, error=error_text(exc))
            next_retry_ms = min(2 * retry_ms, BOOT_RETRY_MS[1])
            self._scheduler.call_later(retry_ms, self._pool.submit, self._recover, job, next_retry_ms)

    def _catch_up(self, job: Job, slot_ms: int) -> None:
        self._scheduler.call_later(self._jitter(job), self._claims.gather, job, slot_ms, Reason.CATCH_UP)

    def _fire(self, job: Job, slot_ms: int) -> None:
        """In the scheduler thread, at ``slot_ms`` + jitter: claim it, and plan the next slot."""
        if not self._active(job):
            return
        self._claims.gather(job, slot_ms, Reason.SCHEDULE)
        following = job.schedule.next_after(slot_ms)
        now = self.clock.now_ms()
        if now >= following:  # the process stalled past the next slot: only the latest slot counts
            latest = job.schedule.at_or_before(now)
            if latest is not None and latest > following:
                following = latest
        self._scheduler.call_at(following + self._jitter(job), self._fire, job, following)

    # -- live runs ---------------------------------------------------------------------------

    def _start_run(self, job: Job, run: Run, claim_sent: float) -> None:
        ids = (run.job, SlotText(run.slot_ms), run.attempt, run.runner, run.reason)
        with self._lock:
            stopping = self._stopping
            if not stopping:
                live = LiveRun(self._support, job, run, claim_sent)
                self._live[live.key] = live
                self._backups.forget(live.key)
        if stopping:  # won while stopping: hand it straight back, it costs no attempt
            log.info("leasecron: won job %r slot %s attempt %d runner %r (%s) while stopping: releasing it", *ids)
            try:
                self._store.release(run.job, run.slot_ms, run.token)
            except Exception as exc:  # noqa: BLE001 - a backup takes it over when the lease runs out
                log.warning("leasecron: could not release job %r slot %s attempt %d runner %r (%s): %s", *ids, exc)
            return
        if run.reason == Reason.TAKEOVER:
            log.info("leasecron: took over job %r slot %s attempt %d runner %r (%s)", *ids)
        else:
            log.info("leasecron: won job %r slot %s attempt %d runner %r (%s)", *ids)
        self._emitter.emit_run("start", run, reason=run.reason)
        live.start()

    def _run_ended(self, live: LiveRun) -> None:
        """A live run's threads are done with it."""
        with self._lock:
            if self._live.get(live.key) is live:
                del self._live[live.key]

    # -- plumbing ------------------------------------------------------------------------------

    def _on_task_error(self, exc: BaseException) -> None:
        self._emitter.emit("error", None, None, error=error_text(exc))

    def _may_back_up(self, job: Job, key: Tuple[str, int]) -> bool:
        """Under the lock: whether a run may be backed up now (not stopping, not live here, the job scheduled)."""
        return not self._stopping and key not in self._live and self._active(job)

    def _holds(self, run: Run) -> bool:
        """Under the lock: whether ``run`` (its current attempt) is one this instance executes."""
        return any(live.run.token == run.token for live in self._live.values())

    def _active(self, job: Job) -> bool:
        """Whether ``job`` is scheduled here: not removed, nor replaced by a job registered again."""
        return self._jobs.get(job.name) is job

    def _jitter(self, job: Job) -> float:
        return random.uniform(0, job.options.jitter_ms)

    def _resync_clock(self) -> None:
        """Read the store's clock again, and plan the reading after (:class:`~leasecron.engine.clock.ClockSync`)."""
        self._scheduler.call_later(self._clock_sync.again(), self._pool.submit, self._resync_clock)
