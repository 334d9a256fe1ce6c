"""The engine: one started session of a :class:`~leasecron.LeaseCron`, its parts built and wired.

Each part is given, as named objects, the few others it needs
(:mod:`.roles`), and a claim goes one way: the scheduler thread finds a slot
due (:mod:`.slots`), its claim joins a batch (:mod:`.batches`), the claim
pool sends it (:mod:`.claims`), and the answer is acted on there: a won run
starts here (:mod:`.live_runs`), a run held elsewhere is backed up
(:mod:`.backups`). The engine itself only starts and stops the session.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence

from ..controls import ManualRequest
from ..events import Emitter, log
from ..errors import StoreError
from ..jobs import Job, Task
from ..runs import Run
from ..stored import StoredSchedule
from ..states import AbortReason
from ..stores import Store
from .announcer import Announcer
from .backups import Backups
from .batches import Batches
from .claim_pool import ClaimPool
from .claims import Claims
from .clock import StoreClock
from .clock_sync import ClockSync
from .live_runs import LiveRuns
from .polling import RequestPoller
from .roles import Instance
from .roster import Roster
from .scheduler import Scheduler
from .slots import BOOT_RETRY_MS, Slots
from .stored_jobs import StoredJobs
from .workers import Workers

__all__ = ["Engine", "IN_FLIGHT_WAIT_S"]

#: How long stop() waits, once the live runs ended, for store calls in flight (claims, the
#: start-up's reads): a claim that wins after that is released at once, without a handler.
IN_FLIGHT_WAIT_S = 0.1
#: How long stop() waits for the store to forget the instance's announcement.
WITHDRAW_WAIT_S = 0.25


class Engine:
    """The threads, live runs and backed-up runs of one ``start()`` … ``stop()``.

    ``scheduler`` (default: a :class:`~leasecron.engine.scheduler.Scheduler`
    on ``clock``), ``workers`` (default: :class:`~leasecron.engine.workers.Workers`)
    and ``executor`` (default: ``claim_threads`` threads, the claim pool's)
    are the engine's from then on: :meth:`stop` stops them. Every time is
    read, and every wait made, through ``clock``. So a test can drive an
    engine in one thread, without waiting: a clock of its own, a scheduler it
    steps (:meth:`~leasecron.engine.scheduler.Scheduler.run_due`) after
    :meth:`boot`, and workers and an executor that run each task at once.
    ``poll_ms``: how often it asks the store for requests of manual runs and
    changes of the stored schedules; ``defaults``: the instance's job options,
    the defaults of the stored jobs it runs.

    The engine plays the :class:`~leasecron.engine.roles.Rescheduler`: it
    schedules each name as :class:`~leasecron.engine.stored_jobs.StoredJobs`
    says, from the jobs in code, the tasks and the store's stored schedules.
    """

    def __init__(
        self,
        store: Store,
        runner: str,
        events: Emitter,
        clock: StoreClock,
        *,
        claim_threads: int = 4,
        poll_ms: int = 1_000,
        defaults: Optional[Mapping[str, Any]] = None,
        scheduler: Optional[Scheduler] = None,
        workers: Optional[Workers] = None,
        executor: Optional[Executor] = None,
        version: str = "",
    ) -> None:
        self.runner = runner
        self.clock = clock
        self._stopped = threading.Event()
        #: Set to cut a stop short (a second signal): live handlers are abandoned.
        self.cold = threading.Event()
        executor = executor or ThreadPoolExecutor(claim_threads, thread_name_prefix="leasecron-claims")
        self._timers = scheduler or Scheduler(clock, events)
        self._tasks = ClaimPool(executor, events)
        self._workers = workers or Workers()
        instance = self._instance = Instance(store, runner, clock, self._timers, self._tasks, events)
        self._stored = StoredJobs(runner, defaults or {})
        self._boot_lock = threading.Lock()
        self._booted = False
        roster = self._roster = Roster()
        live = self._live = LiveRuns(instance, self._workers)
        backups = self._backups = Backups(roster, live, clock)
        clock_sync = self._clock_sync = ClockSync(instance, BOOT_RETRY_MS)
        claims = Claims(instance, clock=clock_sync, roster=roster, live=live, backups=backups, schedules=self)
        batches = Batches(instance, claims, claim_threads)
        self._slots = Slots(instance, roster=roster, batches=batches, backups=claims)
        self._announcer = Announcer(runner, version)
        self._poller = RequestPoller(
            instance, poll_ms, roster=roster, claims=claims, schedules=self, announcer=self._announcer
        )

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, jobs: List[Job], tasks: Sequence[Task] = ()) -> None:
        """Start the scheduler thread, and :meth:`boot` the jobs."""
        self._timers.start()
        self.boot(jobs, tasks)

    def boot(self, jobs: List[Job], tasks: Sequence[Task] = ()) -> None:
        """From the claim pool: read the store's clock and its stored schedules, plan each job's
        next slot and recover it (catch-up). :meth:`start` without the scheduler thread, for an
        owner that steps it. ``jobs`` are those registered in code, ``tasks`` the tasks."""
        self._stored.set_code(jobs)
        self._stored.add_tasks(tasks)
        self._announcer.registers(*self._stored.registered())
        self._roster.add(self._stored.jobs())
        self._tasks.submit(self._boot)

    def _boot(self) -> None:
        # when the store does not answer, the host's clock stands in for its clock until it does
        wait_ms = self._clock_sync.at_start()
        self._load_schedules()
        with self._boot_lock:
            jobs = self._stored.jobs()
            self._roster.add(jobs)
            self._booted = True
        for job in jobs:  # every next slot first: with many jobs, the recoveries take longer
            self._slots.plan(job, recover=False)
        for job in jobs:
            self._slots.recover(job)
        self._clock_sync.keep_reading(wait_ms)
        self._poller.start()

    def _load_schedules(self) -> None:
        """Every stored schedule, before the first slot is planned; the polls bring the later changes
        (and, when the store does not answer now, the first poll brings them all)."""
        try:
            changes = self._instance.store.schedule_changes(0)
        except StoreError as exc:
            line = "leasecron: cannot read the stored schedules on start, runner %r: %s; the next poll reads them"
            log.warning(line, self.runner, exc)
            return
        self._stored.apply(changes.changes)
        self._poller.cursor = changes.cursor

    def add(self, job: Job) -> None:
        """Schedule a job registered in code while running (as a stored schedule says, if one does)."""
        self._settle(self._stored.set_code([job]), recover=True)
        self._announcer.registers(*self._stored.registered())

    def add_task(self, task: Task) -> None:
        """A task registered while running: the stored jobs that name it start here."""
        self._settle(self._stored.add_tasks([task]), recover=True)
        self._announcer.registers(*self._stored.registered())

    def remove(self, job: Job) -> None:
        """Stop scheduling the code's job ``job``: its slots, catch-up, backups and manual runs; its
        live runs go on. A job registered again under its name since is left alone; a stored job of
        that name (whose task is here) is scheduled in its place."""
        self._stored.drop_code(job.name)
        self._settle([job.name], recover=True)
        self._announcer.registers(*self._stored.registered())

    # -- the Rescheduler role --------------------------------------------------------------

    def apply_records(self, records: Iterable[StoredSchedule]) -> None:
        """Schedule each name as its newest stored schedule says (a change of schedule plans the
        new one's next slot, with no catch-up; a name no longer scheduled here is dropped)."""
        self._settle(self._stored.apply(records), recover=False)

    def stale(self, name: str) -> None:
        """Read ``name``'s stored schedule again (from the claim pool), and apply it."""
        self._tasks.submit(self._refresh, name)

    def _refresh(self, name: str) -> None:
        try:
            record = self._instance.store.stored_schedule(name)
        except StoreError as exc:  # the next poll brings the change
            log.debug("leasecron: cannot read the stored schedule of job %r runner %r: %s", name, self.runner, exc)
            return
        if record is not None:
            self.apply_records([record])

    def _settle(self, names: Iterable[str], *, recover: bool) -> None:
        """Make the roster hold, for each of ``names``, the job :class:`StoredJobs` makes of it;
        plan a new one's slots (once booted: the boot plans every job itself)."""
        with self._boot_lock:
            booted = self._booted
            changed = []
            for name in names:
                new, old = self._stored.job(name), self._roster.get(name)
                if new is old:
                    continue
                if new is None:
                    if old is not None and self._roster.remove(old):
                        self._backups.forget_job(name)
                        log.info("leasecron: dropped job %r runner %r: no longer scheduled here", name, self.runner)
                    continue
                self._roster.add([new])
                changed.append((old, new))
        for old, new in changed:
            if old is not None:
                line = "leasecron: rescheduled job %r runner %r: %s (%s, version %d)"
                log.info(line, new.name, self.runner, new.schedule, new.source, new.version)
            if booted:
                self._timers.call_at(0, self._slots.plan, new, recover)

    def offer(self, job: Job, request: ManualRequest) -> None:
        """Claim a request for a manual run of ``job`` that this instance made, without waiting to poll."""
        if self._roster.may_claim(job):
            self._poller.offer(job, request)

    def live_runs(self) -> List[Run]:
        """The runs executing now."""
        return self._live.runs()

    def stop(self, wait_s: float) -> None:
        """Abort every live run (reason ``"stop"``), wait up to ``wait_s`` for the
        handlers, then at most :data:`IN_FLIGHT_WAIT_S` for store calls in flight,
        and abandon what still runs. A second call waits for the first to finish."""
        if not self._roster.stop():
            self._stopped.wait()
            return
        live = self._live.close()  # a claim won from now on is released at once
        self._backups.clear()
        pending = self._tasks.close()  # nothing new is claimed: every claim goes through the pool
        clock = self.clock
        deadline = clock.monotonic() + wait_s
        log.info("leasecron: stopping runner %r: %d live run(s)", self.runner, len(live))
        # The scheduler thread runs on while the handlers wind down: it starts their heartbeat
        # loops and declares lost a run whose store stopped answering, at its local deadline.
        for future in pending:
            future.cancel()
        for run in live:
            run.signal.abort(AbortReason.STOP)
        self._wait_until(lambda: all(r.ended for r in live), deadline)
        # A claim in flight that wins is handed straight back (LiveRuns.start), also after stop()
        # returned; a start-up still waiting on a store that never answered is simply left.
        in_flight_deadline = min(deadline, clock.monotonic() + IN_FLIGHT_WAIT_S)
        self._wait_until(lambda: all(f.done() for f in pending), in_flight_deadline)
        self._withdraw()
        self._timers.stop(timeout=1.0)
        for run in self._live.left():
            run.abandon()
        self._tasks.shutdown()
        self._workers.close()
        self._stopped.set()
        log.info("leasecron: stopped runner %r", self.runner)

    def _withdraw(self) -> None:
        """Take the instance's announcement out of the store, waiting for it at most
        :data:`WITHDRAW_WAIT_S` (a store that does not answer must not hold the stop up); none on a
        cold stop or when no poll stored one. An announcement left behind ages out in 30 s."""
        if self.cold.is_set() or not self._announcer.announced:
            return
        done = threading.Event()

        def withdraw() -> None:
            try:
                self._instance.store.withdraw(self.runner)
            except StoreError as exc:
                log.info("leasecron: cannot withdraw runner %r (it ages out in 30 s): %s", self.runner, exc)
            finally:
                done.set()

        threading.Thread(target=withdraw, name="leasecron-withdraw", daemon=True).start()
        if not done.wait(WITHDRAW_WAIT_S):
            log.info("leasecron: withdrawing runner %r takes long: left to age out in 30 s", self.runner)

    def _wait_until(self, condition: Callable[[], bool], deadline: float) -> None:
        """Wait until ``condition()``, the monotonic ``deadline``, or a cold stop."""
        while not condition() and not self.cold.is_set():
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return
            self.clock.wait(self.cold, min(left, 0.02))
