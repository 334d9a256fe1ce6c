"""LeaseCron: the public face of an instance — its jobs, options, events and lifecycle.

Registration (``job``, ``add_job``, ``remove_job``, ``task``), events (``on``), the
options, the cluster-wide controls (``pause``, ``resume``, ``trigger``) and the
schedules held as data (``reschedule``, ``put_job``, ``delete_job``, ``stored_jobs``),
which only write to (or read) the store, live here; the threads of a started instance
live in :class:`~leasecron.engine.Engine`, created by :meth:`LeaseCron.start`
and finished by :meth:`LeaseCron.stop`.

The fork rule: a ``LeaseCron`` that runs when its process forks is *stopped*
in the child. The child's copy drops its engine (it holds no threads and no
leases), logs a warning that says so, and runs jobs only once ``start()`` is
called in the child. :func:`instances` lists the instances of this process.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Type, Union

from .engine.clock import StoreClock
from .controls import JobState
from .engine import Engine
from .errors import ConfigError
from .events import Callback, Emitter, SlotText, log
from .version import __version__
from .jobs import Handler, Job, Task, job_decorator, make_job
from .schedule_data import ScheduleData
from .options import INSTANCE_OPTIONS, JOB_OPTIONS, resolve_options
from .runs import Run
from .schedules import ScheduleSpec
from .engine.signals import handle_signals
from .stores import Store, open_store
from .limits import check_text

__all__ = ["LeaseCron", "default_runner", "instances"]

_INSTANCES: "weakref.WeakSet[LeaseCron]" = weakref.WeakSet()
#: How often run_forever() looks for a signal, in seconds.
SIGNAL_POLL_S = 0.05


def instances() -> List["LeaseCron"]:
    """Every :class:`LeaseCron` of this process that still exists (started or not), in no order.

    The instances are held weakly: one that nothing else refers to any more
    is dropped. ``[c for c in instances() if c.running]`` are the started ones
    (what :mod:`leasecron.contrib.gunicorn` stops in its master process).
    """
    return list(_INSTANCES)


def default_runner() -> str:
    """``<hostname>-<pid>``: the runner name of an instance that was given none."""
    return f"{socket.gethostname()}-{os.getpid()}"


class LeaseCron(ScheduleData):
    """Runs the registered jobs: each slot exactly once, on one instance of the cluster.

    ``store`` is a :class:`~leasecron.Store` or a store URL. ``runner`` names
    this instance in the store (default ``"<hostname>-<pid>"``). The options
    are those of :data:`leasecron.options.OPTIONS`, in its order: the job
    options are the defaults of every job (each job may override them);
    ``stop_timeout_ms`` is how long :meth:`stop` waits for running handlers;
    ``claim_threads`` how many threads send the instance's store calls;
    ``poll_ms`` how often a started instance asks the store for requests of
    manual runs (:meth:`trigger`): one call for all its jobs.
    """

    def __init__(
        self,
        store: Union[Store, str],
        runner: Optional[str] = None,
        *,
        # the job options: the defaults of every job (None: not set here, the option's default applies)
        lease_ms: Optional[int] = None, heartbeat_ms: Optional[int] = None, max_attempts: Optional[int] = None,
        overlap: Optional[str] = None, catch_up_ms: Optional[int] = None, max_late_ms: Optional[int] = None,
        jitter_ms: Optional[int] = None, history_size: Optional[int] = None, tz: Optional[str] = None,
        timeout_ms: Optional[int] = None, retries: Optional[int] = None, retry_delay_ms: Optional[int] = None,
        lease_margin_ms: Optional[int] = None,
        # the instance's own options
        stop_timeout_ms: int = 10_000, claim_threads: int = 4, poll_ms: int = 1_000,
    ) -> None:  # fmt: skip
        if isinstance(store, str):
            store = open_store(store)
        if not isinstance(store, Store):
            raise ConfigError(f"store must be a leasecron Store or a store URL, not {store!r}")
        if runner is not None and (not isinstance(runner, str) or not runner):
            raise ConfigError(f"runner must be a non-empty string, not {runner!r}")
        if runner is not None:
            check_text("runner", runner)
        given = dict(
            lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, max_attempts=max_attempts, overlap=overlap,
            catch_up_ms=catch_up_ms, max_late_ms=max_late_ms, jitter_ms=jitter_ms, history_size=history_size, tz=tz,
            timeout_ms=timeout_ms, retries=retries, retry_delay_ms=retry_delay_ms, lease_margin_ms=lease_margin_ms,
            stop_timeout_ms=stop_timeout_ms, claim_threads=claim_threads, poll_ms=poll_ms,
        )  # fmt: skip
        for option in INSTANCE_OPTIONS:
            option.check(given[option.name])
        #: The job options given here: the defaults of every job.
        self._defaults: Dict[str, Any] = {o.name: given[o.name] for o in JOB_OPTIONS if given[o.name] is not None}
        resolve_options(self._defaults, {})  # together, as a job would use them: a heartbeat under half the lease
        self.store: Store = store
        self._runner_given = runner
        self.runner: str = runner or default_runner()
        self.stop_timeout_ms = stop_timeout_ms
        self._claim_threads = claim_threads
        #: How often a started instance asks the store for requests of manual runs, in ms.
        self.poll_ms = poll_ms
        self._jobs: Dict[str, Job] = {}
        self._tasks: Dict[str, Task] = {}
        self._emitter = Emitter(self.runner)
        self._lock = threading.RLock()
        self._engine: Optional[Engine] = None
        #: This instance's estimate of the store's clock.
        self.clock = StoreClock(self.store)
        _INSTANCES.add(self)

    # -- registration ------------------------------------------------------------

    def job(
        self, schedule: ScheduleSpec, *, name: Optional[str] = None, **options: Any
    ) -> Callable[[Handler], Handler]:
        """Decorator: register the function as a job (see :meth:`add_job`); returns it unchanged."""
        return job_decorator(self.add_job, schedule, name, options)

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
            engine = self._engine
        if engine is not None:
            engine.add(job)
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

    def remove_job(self, job: str) -> Job:
        """Unregister ``job`` on this instance only, and return it.

        A started instance stops scheduling it at once: no more slots, no
        catch-up, no backup checks of its runs and no manual runs of it here.
        Its live runs on this instance go on and end as usual (heartbeats,
        finish; hand-over on :meth:`stop`). The store and the other instances
        are not told: they go on running the job. :meth:`add_job` may register
        it again. An unknown name raises :class:`~leasecron.ConfigError`.
        """
        with self._lock:
            removed = self._registered(job, "remove_job")
            del self._jobs[job]
            engine = self._engine
        if engine is not None:
            engine.remove(removed)
        log.info("leasecron: removed job %r runner %r: its live runs here end as usual", job, self.runner)
        return removed

    # -- cluster-wide controls, held in the store ----------------------------------------

    def pause(self, job: str, note: Optional[str] = None) -> JobState:
        """Pause ``job`` on every instance, until :meth:`resume`; returns its state in the store.

        It only writes to the store (rule 18), so it works on an instance
        that was never started: the job is paused by this instance's
        ``runner``, at the store's "now", with ``note`` (why; at most 1 000
        characters). From then on each new scheduled or catch-up claim of the
        job, on any instance, is answered ``paused`` and emits ``skip`` with
        reason ``"paused"``. A run already running goes on, and a backup still
        takes it over if its runner dies; a manual run (:meth:`trigger`) runs
        all the same. Pausing a paused job replaces who, when and the note.

        ``job`` must be registered here: an unknown name raises
        :class:`~leasecron.ConfigError` naming it (``store.pause(job, by=...)``
        and ``leasecron pause URL JOB`` act on any job, such as another app's).
        """
        self._registered(job, "pause")
        state = self.store.pause(job, by=self.runner, note=note)
        if note:
            log.info("leasecron: paused job %r runner %r: %s", job, self.runner, note)
        else:
            log.info("leasecron: paused job %r runner %r", job, self.runner)
        return state

    def resume(self, job: str) -> JobState:
        """Undo :meth:`pause` on every instance; returns the job's state in the store.

        It only writes to the store (rule 18). The job's next slot runs as
        usual; the slots skipped while it was paused are not caught up.
        Resuming a job that is not paused changes nothing. An unknown name
        raises :class:`~leasecron.ConfigError`, as for :meth:`pause`.
        """
        self._registered(job, "resume")
        state = self.store.resume(job, by=self.runner)
        log.info("leasecron: resumed job %r runner %r", job, self.runner)
        return state

    def trigger(self, job: str) -> int:
        """Ask for one run of ``job`` now, on exactly one instance; returns its slot (epoch ms).

        It writes a request to the store (rule 19), so it works on an
        instance that was never started; the slot is the store's "now".
        Exactly one started instance that has the job registered (this one,
        if started, tries at once; the others find the request within their
        ``poll_ms``) claims it with reason ``"manual"``, and runs it as an
        ordinary run from then on (lease, heartbeats, takeover, fencing,
        hand-over, history); ``start`` and ``Context.reason`` say
        ``"manual"``. It runs even while the job is paused, and obeys
        ``overlap``: with ``"skip"``, a run of the job holding its lease
        makes it ``skip`` (reason ``"overlap"``). A request that no instance
        claims within the job's ``max_late_ms`` + 10 s expires. An unknown
        name raises :class:`~leasecron.ConfigError`, as for :meth:`pause`.
        """
        registered = self._registered(job, "trigger")
        request = self.store.request_run(job, by=self.runner, max_late_ms=registered.options.max_late_ms)
        line = "leasecron: triggered job %r slot %s runner %r (manual): the request expires at %s"
        log.info(line, job, SlotText(request.slot_ms), self.runner, SlotText(request.expires_ms))
        engine = self._engine
        if engine is not None:
            engine.offer(registered, request)
        return request.slot_ms

    def _registered(self, job: str, action: str) -> Job:
        """The registered job named ``job``; :class:`~leasecron.ConfigError` naming it for another name."""
        with self._lock:
            found = self._jobs.get(job) if isinstance(job, str) else None
            names = sorted(self._jobs)
        if found is None:
            known = ", ".join(repr(name) for name in names) or "none"
            hint = ""
            if action != "remove_job":  # the store and the CLI act on any job
                call = "request_run" if action == "trigger" else action
                hint = f"; for a job of another app, use store.{call}(...) or leasecron {action} URL JOB"
            raise ConfigError(f"{action}: job {job!r} is not registered on this instance (registered: {known}){hint}")
        return found

    # -- lifecycle ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between :meth:`start` and the end of :meth:`stop`."""
        return self._engine is not None

    def live_runs(self) -> List[Run]:
        """The runs this instance is executing now."""
        engine = self._engine
        return [] if engine is None else engine.live_runs()

    def start(self) -> None:
        """Start the threads and return at once. Calling it again does nothing."""
        with self._lock:
            if self._engine is not None:
                return
            engine = self._engine = Engine(
                self.store, self.runner, self._emitter, self.clock, claim_threads=self._claim_threads,
                poll_ms=self.poll_ms, defaults=self._defaults, version=__version__,
            )  # fmt: skip
            jobs = list(self._jobs.values())
            tasks = list(self._tasks.values())
        atexit.register(self._at_exit)
        log.info("leasecron: starting runner %r: %d job(s) on %r", self.runner, len(jobs), self.store)
        engine.start(jobs, tasks)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop gracefully; ``timeout`` in seconds (default ``stop_timeout_ms``).

        Aborts every live run's signal (reason ``"stop"``) and waits: a handler
        that raises is released (handed over to a backup), one that returns
        is finished as success, one still running at the timeout is abandoned
        (no more heartbeats; a backup takes over when its lease runs out).
        Stops watching as a backup. Idempotent.
        """
        engine = self._engine
        if engine is None:
            return
        engine.stop(self.stop_timeout_ms / 1000 if timeout is None else max(0.0, timeout))
        with self._lock:
            if self._engine is engine:
                self._engine = None
        atexit.unregister(self._at_exit)

    def run_forever(self) -> None:
        """Start, block until SIGTERM or SIGINT, then :meth:`stop`.

        A second signal while stopping stops at once (live handlers are
        abandoned). Off the main thread no handler is installed: it blocks
        until another thread calls :meth:`stop`.

        The signal handler only appends to a list: it runs in the main thread
        between two bytecodes, where that thread may hold any lock (an
        ``Event``'s inside ``wait()``), so it takes none and logs nothing.
        The main thread polls the list and runs :meth:`stop` in a thread of
        its own, so that it stays free to see a second signal.
        """
        signals: List[int] = []
        with handle_signals(signals.append):  # before start: a signal during the start stops it cleanly
            self.start()
            engine = self._engine
            while not signals:
                if not self.running:
                    return
                time.sleep(SIGNAL_POLL_S)
            log.info("leasecron: stopping runner %r: signal %d", self.runner, signals[0])
            stopper = threading.Thread(target=self.stop, name="leasecron-stop", daemon=True)
            stopper.start()
            cold = False
            while stopper.is_alive():
                if len(signals) > 1 and not cold:
                    cold = True
                    log.warning("leasecron: stopping now runner %r: second signal %d", self.runner, signals[1])
                    if engine is not None:
                        engine.cold.set()
                stopper.join(SIGNAL_POLL_S)

    def __enter__(self) -> "LeaseCron":
        self.start()
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()

    def _at_exit(self) -> None:
        if self.running:
            log.info("leasecron: stopping runner %r: the interpreter exits", self.runner)
            self.stop()

    def _after_fork_in_child(self) -> None:
        """The fork rule: a copy forked from a running instance is stopped, and says so.

        The parent's threads and leases do not exist in the child, so the copy
        holds none (``running`` is False) and runs jobs only once ``start()``
        is called in the child. It is never restarted on its own: the child
        may be a ``multiprocessing`` worker or a gunicorn master, where no job
        should run. A warning names the copy, so it is never silently dead.
        """
        was_started = self._engine is not None
        parent_runner = self.runner
        self._engine = None  # the parent's threads and leases do not exist here
        self._lock = threading.RLock()
        self.clock = StoreClock(self.store)
        if self._runner_given is None:
            self.runner = default_runner()
        self._emitter.after_fork(self.runner)
        if was_started:
            log.warning(
                "leasecron: process %d was forked from process %d while LeaseCron %r ran there; the copy"
                " in this process is stopped (no threads, no leases) and runs no job until start() is"
                " called in this process (under gunicorn, leasecron.contrib.gunicorn's post_fork does)",
                os.getpid(),
                os.getppid(),
                parent_runner,
            )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LeaseCron {self.runner!r} {state}, {len(self._jobs)} job(s), store={self.store!r}>"


def _after_fork_in_child() -> None:
    for cron in instances():
        cron._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
