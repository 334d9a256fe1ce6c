"""LeaseCron: the scheduler an instance runs. Design, in threads:

* **one scheduler thread** (:mod:`leasecron.timers`) holds a heap of what is
  due on the store's clock: each job's next slot (plus its jitter), each
  backup's next check, each live run's lease deadline. It never waits on the
  store: it hands every store call to
* **the claim pool** (the backup pollers): a few threads that send claims —
  scheduled, catch-up and takeover — and act on the outcome;
* **for each live run a run thread and a heartbeat thread**
  (:mod:`leasecron.live`).

A claim's outcome decides what this instance does: ``won`` starts a live
run; ``running`` makes it a backup of the run, re-checked with a takeover
claim after a uniform random 1–2 heartbeats until the run ends or is won;
``overlap`` emits ``skip`` and watches both the earlier run and the new
slot; ``late`` and ``early`` emit ``skip``.

On start, each job is recovered (catch-up): its unfinished runs are watched
or taken over, and the latest slot, if it was due less than ``catch_up_ms``
ago, is claimed after a jitter with reason ``catch-up``.
"""

from __future__ import annotations

import atexit
import os
import random
import socket
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type, Union

from .clock import StoreClock
from .events import Callback, Emitter, log
from .errors import ConfigError
from .jobs import Handler, Job, make_job
from .lifecycle import handle_signals
from .live import LiveRun, error_text
from .options import check_option
from .retry import call_until
from .runs import CATCH_UP, LATE_TOLERANCE_MS, SCHEDULE, TAKEOVER, WON, Claim, Run
from .schedules import ScheduleSpec
from .stores import Store, open_store
from .timers import Timers

__all__ = ["LeaseCron", "default_runner"]

_CLOCK_SYNC_MS = 60_000
_INSTANCES: "weakref.WeakSet[LeaseCron]" = weakref.WeakSet()


def default_runner() -> str:
    """``<hostname>-<pid>``: the runner name of an instance that was given none."""
    return f"{socket.gethostname()}-{os.getpid()}"


class LeaseCron:
    """Runs the registered jobs: each slot exactly once, on one instance of the cluster.

    ``store`` is a :class:`~leasecron.Store` or a store URL. ``runner`` names
    this instance in the store (default ``"<hostname>-<pid>"``). The options
    are the defaults of every job (each job may override them);
    ``stop_timeout_ms`` is how long :meth:`stop` waits for running handlers.
    """

    def __init__(
        self,
        store: Union[Store, str],
        runner: Optional[str] = None,
        *,
        lease_ms: Optional[int] = None,
        heartbeat_ms: Optional[int] = None,
        max_attempts: Optional[int] = None,
        overlap: Optional[str] = None,
        catch_up_ms: Optional[int] = None,
        max_late_ms: Optional[int] = None,
        jitter_ms: Optional[int] = None,
        history_size: Optional[int] = None,
        tz: Optional[str] = None,
        stop_timeout_ms: int = 10_000,
        claim_threads: int = 4,
    ) -> None:
        if isinstance(store, str):
            store = open_store(store)
        if not isinstance(store, Store):
            raise ConfigError(f"store must be a leasecron Store or a store URL, not {store!r}")
        if runner is not None and (not isinstance(runner, str) or not runner):
            raise ConfigError(f"runner must be a non-empty string, not {runner!r}")
        for name, value, minimum in (("stop_timeout_ms", stop_timeout_ms, 0), ("claim_threads", claim_threads, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"LeaseCron: {name} must be an integer >= {minimum}, not {value!r}")
        given = dict(
            lease_ms=lease_ms,
            heartbeat_ms=heartbeat_ms,
            max_attempts=max_attempts,
            overlap=overlap,
            catch_up_ms=catch_up_ms,
            max_late_ms=max_late_ms,
            jitter_ms=jitter_ms,
            history_size=history_size,
            tz=tz,
        )
        self._defaults = {k: v for k, v in given.items() if v is not None}
        for name, value in self._defaults.items():
            check_option(name, value)
        self.store: Store = store
        self._runner_given = runner
        self.runner: str = runner or default_runner()
        self.stop_timeout_ms = stop_timeout_ms
        self._claim_threads = claim_threads
        self._jobs: Dict[str, Job] = {}
        self._emitter = Emitter(self.runner)
        self._reset()
        _INSTANCES.add(self)

    def _reset(self) -> None:
        """The state of an instance that is not started (also a forked child's copy)."""
        self._lock = threading.RLock()
        self._started = False
        self._stopping = False
        self._stopped = threading.Event()
        self._cold = threading.Event()
        self._live: Dict[Tuple[str, int], LiveRun] = {}
        self._watching: Set[Tuple[str, int]] = set()
        self._pending: Set["Future[Any]"] = set()
        self._pool: Optional[ThreadPoolExecutor] = None
        self.clock = StoreClock(self.store)
        self._timers = Timers(self.clock, self._on_task_error)

    # -- registration ------------------------------------------------------------

    def job(
        self, schedule: ScheduleSpec, *, name: Optional[str] = None, **options: Any
    ) -> Callable[[Handler], Handler]:
        """Decorator: register the function as a job (see :meth:`add_job`); returns it unchanged."""

        def register(func: Handler) -> Handler:
            self.add_job(func, schedule, name=name, **options)
            return func

        return register

    def add_job(
        self, func: Handler, schedule: ScheduleSpec, *, name: Optional[str] = None, **options: Any
    ) -> Job:
        """Register ``func`` to run on ``schedule``: a cron string, a timedelta or seconds.

        ``name`` defaults to ``"module.qualname"``; ``options`` override the
        instance's defaults for this job. Raises
        :class:`~leasecron.ConfigError` naming the job and the option.
        """
        job = make_job(func, schedule, name, self._defaults, options)
        with self._lock:
            if job.name in self._jobs:
                raise ConfigError(f"job {job.name!r} is already registered")
            self._jobs[job.name] = job
            started = self._started and not self._stopping
        if started:
            self._timers.call_at(0, self._boot_job, job)
        return job

    @property
    def jobs(self) -> Dict[str, Job]:
        """The registered jobs, by name (a copy)."""
        with self._lock:
            return dict(self._jobs)

    def on(self, event: str, callback: Callback) -> None:
        """Call ``callback(event)`` on each event of a type: start, success, failed,
        skip, lost, handover, error. A callback that raises is logged and ignored."""
        self._emitter.on(event, callback)

    # -- lifecycle ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between :meth:`start` and the end of :meth:`stop`."""
        return self._started

    def live_runs(self) -> List[Run]:
        """The runs this instance is executing now."""
        with self._lock:
            return [live.run for live in self._live.values()]

    def start(self) -> None:
        """Start the threads and return at once. Calling it again does nothing."""
        with self._lock:
            if self._started:
                return
            self._started = True
            self._stopping = False
            self._stopped.clear()
            self._cold.clear()
            self._timers = Timers(self.clock, self._on_task_error)
            self._pool = ThreadPoolExecutor(self._claim_threads, thread_name_prefix="leasecron-claims")
            self._timers.start()
            jobs = list(self._jobs.values())
        atexit.register(self._at_exit)
        log.info("leasecron: %s starting with %d job(s) on %r", self.runner, len(jobs), self.store)
        self._submit(self._boot, jobs)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop gracefully; ``timeout`` in seconds (default ``stop_timeout_ms``).

        Aborts every live run's signal (reason ``"stop"``) and waits: a handler
        that raises is released (handed over to a backup), one that returns
        is finished as success, one still running at the timeout is abandoned
        (no more heartbeats; a backup takes over when its lease runs out).
        Stops watching as a backup. Idempotent.
        """
        with self._lock:
            if not self._started:
                return
            if self._stopping:
                waiting = True
            else:
                waiting = False
                self._stopping = True
                live = list(self._live.values())
                self._watching.clear()
        if waiting:
            self._stopped.wait()
            return
        wait_s = self.stop_timeout_ms / 1000 if timeout is None else max(0.0, timeout)
        deadline = time.monotonic() + wait_s
        log.info("leasecron: %s stopping (%d live run(s))", self.runner, len(live))
        self._timers.stop(timeout=1.0)
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()
        for run in live:
            run.signal.abort("stop")
        self._wait_until(lambda: all(r.ended.is_set() for r in live) and all(f.done() for f in pending), deadline)
        with self._lock:
            leftovers = list(self._live.values())
        for run in leftovers:
            run.abandon()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        atexit.unregister(self._at_exit)
        with self._lock:
            self._started = False
            self._stopping = False
            self._stopped.set()
        log.info("leasecron: %s stopped", self.runner)

    def run_forever(self) -> None:
        """Start, block until SIGTERM or SIGINT, then :meth:`stop`.

        A second signal while stopping stops at once (live handlers are
        abandoned). Off the main thread no handler is installed: it blocks
        until another thread calls :meth:`stop`.
        """
        requested = threading.Event()

        def on_signal(signum: int) -> None:
            if requested.is_set():
                log.warning("leasecron: second signal %d: stopping now", signum)
                self._cold.set()
            else:
                log.info("leasecron: signal %d: stopping", signum)
            requested.set()

        self.start()
        with handle_signals(on_signal):
            while not requested.wait(0.2):
                if not self._started:
                    return
            self.stop()

    def __enter__(self) -> "LeaseCron":
        self.start()
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()

    def _at_exit(self) -> None:
        if self._started:
            log.info("leasecron: interpreter exiting: stopping %s", self.runner)
            self.stop()

    def _after_fork_in_child(self) -> None:
        was_started = self._started
        self._reset()
        if self._runner_given is None:
            self.runner = default_runner()
        self._emitter.after_fork(self.runner)
        if was_started:
            log.warning(
                "leasecron: this process was forked from one running LeaseCron; this copy holds no"
                " threads and no leases: call start() to run jobs in this process"
            )

    def __repr__(self) -> str:
        state = "running" if self._started else "stopped"
        return f"<LeaseCron {self.runner!r} {state}, {len(self._jobs)} job(s), store={self.store!r}>"

    # -- the scheduler's work -----------------------------------------------------------

    def _boot(self, jobs: List[Job]) -> None:
        self._sync_clock()
        for job in jobs:
            self._boot_job(job)
        self._timers.call_later(_CLOCK_SYNC_MS, self._submit, self._resync_clock)

    def _boot_job(self, job: Job) -> None:
        now = self.clock.now_ms()
        slot = job.schedule.next_after(now)
        self._timers.call_at(slot + self._jitter(job), self._fire, job, slot)
        self._submit(self._recover, job)

    def _fire(self, job: Job, slot_ms: int) -> None:
        """In the scheduler thread, at ``slot_ms`` + jitter: claim it, and plan the next slot."""
        self._submit(self._claim, job, slot_ms, SCHEDULE)
        following = job.schedule.next_after(slot_ms)
        latest = job.schedule.at_or_before(self.clock.now_ms())
        if latest is not None and latest > following:  # the process stalled: only the latest slot counts
            following = latest
        self._timers.call_at(following + self._jitter(job), self._fire, job, following)

    def _recover(self, job: Job) -> None:
        """Catch-up on start: unfinished runs first, then the missed latest slot."""
        now = self.clock.now_ms()
        latest = job.schedule.at_or_before(now)
        claimed_latest = False
        unfinished = call_until(
            lambda: self.store.unfinished(job.name), time.monotonic() + 2 * job.options.heartbeat_ms / 1000
        )
        for run in unfinished:
            if latest is not None and run.slot_ms < latest:
                if run.lease_end_ms > now:
                    self._watch(job, run.slot_ms)  # lease alive: a backup of it
                # else a newer slot is due: leave it; the next run replaces it
                continue
            claimed_latest = claimed_latest or run.slot_ms == latest
            if run.lease_end_ms > now:
                self._watch(job, run.slot_ms)
            else:  # expired and still the latest: claim the next attempt now
                self._watch(job, run.slot_ms, delay_ms=0)
        catch_up = job.options.catch_up_ms
        if latest is not None and not claimed_latest and catch_up > 0 and now - latest < catch_up:
            self._timers.call_later(self._jitter(job), self._submit, self._claim, job, latest, CATCH_UP)

    def _claim(self, job: Job, slot_ms: int, reason: str) -> Optional[Claim]:
        """Send one claim (retried while its answer matters) and act on the outcome."""
        if self._stopping:
            return None
        opts = job.options
        max_late = opts.catch_up_ms if reason == CATCH_UP else opts.max_late_ms
        if reason == TAKEOVER:
            matters_s = opts.heartbeat_ms / 1000
        else:
            matters_s = (slot_ms + max_late + LATE_TOLERANCE_MS - self.clock.now_ms()) / 1000
        sent = time.monotonic()
        try:
            claim = call_until(
                lambda: self.store.claim(
                    job.name,
                    slot_ms,
                    runner=self.runner,
                    reason=reason,
                    lease_ms=opts.lease_ms,
                    max_attempts=opts.max_attempts,
                    max_late_ms=max_late,
                    overlap=opts.overlap,
                    history_size=opts.history_size,
                ),
                sent + max(matters_s, 0.0),
            )
        except Exception as exc:  # noqa: BLE001 - reported; the next slot or check tries again
            log.error("leasecron: %s claim of job %r slot %d failed: %s", reason, job.name, slot_ms, exc)
            self._emitter.emit("error", job.name, slot_ms, reason=reason, error=error_text(exc))
            return None
        outcome = claim.outcome
        if outcome == WON:
            assert claim.run is not None
            self._start_run(job, claim.run, sent)
        elif outcome == "running":
            log.debug("leasecron: job %r slot %d is running elsewhere: backup", job.name, slot_ms)
            self._watch(job, slot_ms)
        elif outcome in ("overlap", "late", "early"):
            log.info("leasecron: skip job %r slot %d (%s)", job.name, slot_ms, outcome)
            self._emitter.emit("skip", job.name, slot_ms, reason=outcome, run=claim.run)
            if outcome == "overlap" and claim.run is not None:
                self._watch(job, claim.run.slot_ms)
                self._watch(job, slot_ms)
            elif outcome == "early":
                # our estimate of the store's clock runs ahead (its clock stepped back): re-read
                # it, and claim the slot again when it is due on the store's clock
                self._sync_clock()
                due = max(slot_ms + self._jitter(job), self.clock.now_ms() + opts.heartbeat_ms)
                self._timers.call_at(due, self._submit, self._claim, job, slot_ms, reason)
        else:
            log.debug("leasecron: %s claim of job %r slot %d: %s", reason, job.name, slot_ms, outcome)
        return claim

    # -- backups ------------------------------------------------------------------------

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
        claim = self._claim(job, slot_ms, TAKEOVER)
        with self._lock:
            mine = claim is not None and claim.run is not None and any(
                live.run.token == claim.run.token for live in self._live.values()
            )
        if claim is None:
            keep = True
        elif claim.outcome == "running":
            keep = not mine
        elif claim.outcome == "none":  # nobody claimed the slot yet; it may still be claimed
            horizon = slot_ms + job.options.max_late_ms + LATE_TOLERANCE_MS
            keep = self.clock.now_ms() <= horizon
        else:
            keep = False
        with self._lock:
            if keep and key in self._watching and not self._stopping:
                self._plan_check(job, slot_ms)
            else:
                self._watching.discard(key)

    # -- live runs ----------------------------------------------------------------------

    def _start_run(self, job: Job, run: Run, claim_sent: float) -> None:
        with self._lock:
            stopping = self._stopping or not self._started
            if not stopping:
                live = LiveRun(self, job, run, claim_sent)
                self._live[live.key] = live
                self._watching.discard(live.key)
        if stopping:  # won while stopping: hand it straight back, it costs no attempt
            log.info("leasecron: won job %r slot %d while stopping: releasing it", job.name, run.slot_ms)
            try:
                self.store.release(run.job, run.slot_ms, run.token)
            except Exception as exc:  # noqa: BLE001 - a backup takes it over when the lease runs out
                log.warning("leasecron: could not release job %r slot %d: %s", job.name, run.slot_ms, exc)
            return
        log.info(
            "leasecron: won job %r slot %s attempt %d (%s)", job.name, run.slot.isoformat(), run.attempt, run.reason
        )
        self._emit("start", run, reason=run.reason)
        live.start()

    def _run_ended(self, live: LiveRun) -> None:
        with self._lock:
            if self._live.get(live.key) is live:
                del self._live[live.key]

    def _emit(self, name: str, run: Run, *, reason: Optional[str] = None, error: Optional[str] = None) -> None:
        self._emitter.emit(name, run.job, run.slot_ms, attempt=run.attempt, reason=reason, error=error, run=run)

    # -- plumbing ----------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the claim pool; a failure is logged and emitted as ``error``."""
        with self._lock:
            pool = self._pool
            if pool is None or self._stopping or not self._started:
                return
            try:
                future = pool.submit(self._guarded, fn, *args)
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

    def _call_at_monotonic(self, mono_s: float, fn: Callable[..., Any], *args: Any) -> None:
        self._timers.call_at(self.clock.at_monotonic(mono_s), fn, *args)

    def _wait_until(self, condition: Callable[[], bool], deadline: float) -> None:
        """Wait until ``condition()``, the monotonic ``deadline``, or a cold stop."""
        while not condition() and not self._cold.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cold.wait(min(left, 0.02))

    def _jitter(self, job: Job) -> float:
        return random.uniform(0, job.options.jitter_ms)

    def _sync_clock(self) -> None:
        try:
            self.clock.sync()
        except Exception as exc:  # noqa: BLE001 - keep the last estimate; tried again later
            log.warning("leasecron: cannot read the store's clock: %s", exc)
            self._emitter.emit("error", None, None, error=error_text(exc))
        else:
            log.debug(
                "leasecron: store clock offset %.1f ms, round trip %.2f ms",
                self.clock.offset_ms,
                self.clock.round_trip_ms or 0.0,
            )

    def _resync_clock(self) -> None:
        self._sync_clock()
        self._timers.call_later(_CLOCK_SYNC_MS, self._submit, self._resync_clock)


def _after_fork_in_child() -> None:
    for cron in list(_INSTANCES):
        cron._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
