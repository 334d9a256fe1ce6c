"""gunicorn: every worker of a gunicorn server runs the app's :class:`~leasecron.LeaseCron`.

In ``gunicorn.conf.py``, ``globals().update(hooks("app:cron"))``: :func:`hooks` returns
gunicorn's server hooks by name, for a target ``"module:attr"`` (a ``LeaseCron``, or a Flask app
whose ``extensions["leasecron"]`` is one); a conf with hooks of its own calls the methods of a
:class:`GunicornHooks`. The one idea: the master runs no job (a cron running there is stopped
before any fork), ``post_fork`` starts the cron in each worker, and ``worker_exit`` hands its
runs over, waiting only as long as gunicorn lets a stopping worker live; on a reload, a
replaced worker keeps its cron until a new worker runs one. :doc:`The gunicorn guide <gunicorn>`
says what each hook does, the signals, ``preload_app`` and the timeouts.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Union

from ..cron import LeaseCron, instances
from ..cli.targets import check_target, load_cron

__all__ = ["GunicornHooks", "hooks", "find_cron", "ABORT_STOP_S", "STOP_MARGIN_S", "LINGER_MAX_S"]

#: How long (s) a worker killed for its timeout (SIGABRT) waits for its handlers in ``worker_exit``.
ABORT_STOP_S = 0.5
#: Seconds kept free before gunicorn's ``graceful_timeout`` (and ``timeout``) ends a stopping worker.
STOP_MARGIN_S = 1.0
#: The longest (s) a worker that a reload replaces waits for a new worker to start its cron.
LINGER_MAX_S = 10.0
#: How often (s) a lingering worker looks whether a new worker started.
_LINGER_POLL_S = 0.02

#: gunicorn's Arbiter and Worker (gunicorn ships no type hints).
Server = Any
Worker = Any


class _Generations:
    """Two counters in anonymous shared memory, mapped before any fork, so the master and
    all its workers (old and new) see the same values: the reloads the master made, and the
    newest generation (reload count at its fork) of a worker that started its cron."""

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, 8)  # MAP_SHARED | MAP_ANONYMOUS: inherited by every fork
        self._reloads = ctypes.c_uint32.from_buffer(self._memory, 0)
        self._started = ctypes.c_uint32.from_buffer(self._memory, 4)

    @property
    def reloads(self) -> int:
        """How many reloads (HUP) the master made."""
        return int(self._reloads.value)

    @property
    def started(self) -> int:
        """The newest generation of a worker whose cron started."""
        return int(self._started.value)

    def reloaded(self) -> None:
        """The master reloads: the workers it forks next are a new generation."""
        self._reloads.value += 1

    def start(self, generation: int) -> None:
        """A worker of ``generation`` started its cron."""
        if generation > self._started.value:
            self._started.value = generation


_GENERATIONS = _Generations()


def find_cron(target: str) -> LeaseCron:
    """Import ``"module:attr"`` and return the ``LeaseCron`` it names (see
    :func:`leasecron.cli.targets.load_cron`: a ``LeaseCron``, or a Flask app whose
    ``extensions["leasecron"]`` is one; ``attr`` may be dotted or call a factory).
    Raises :class:`~leasecron.ConfigError` saying what was found instead."""
    return load_cron(target, "leasecron")


def _running_crons() -> List[LeaseCron]:
    """The ``LeaseCron`` instances of this process that are started."""
    return [cron for cron in instances() if cron.running]


class GunicornHooks:
    """gunicorn server hooks that run ``target``'s cron in the workers (see :doc:`gunicorn`).

    ``target`` is a ``"module:attr"`` string (imported in each worker, never
    in the master) or the ``LeaseCron`` itself.
    """

    def __init__(self, target: Union[str, LeaseCron]) -> None:
        if not isinstance(target, LeaseCron):
            check_target(target, "leasecron")  # a malformed target fails when gunicorn reads its conf
        self.target = target
        self._cron: Optional[LeaseCron] = None
        self._generation = 0
        self._aborted = False

    def cron(self) -> LeaseCron:
        """The cron: ``target`` itself, or imported from it."""
        return self.target if isinstance(self.target, LeaseCron) else find_cron(self.target)

    def as_dict(self) -> Dict[str, Callable[..., None]]:
        """The hooks by gunicorn's setting names, for ``globals().update(...)`` in a conf file."""
        return {
            "on_starting": self.on_starting,
            "on_reload": self.on_reload,
            "pre_fork": self.pre_fork,
            "post_fork": self.post_fork,
            "worker_abort": self.worker_abort,
            "worker_exit": self.worker_exit,
        }

    # -- the master ------------------------------------------------------------------

    def on_starting(self, server: Server) -> None:
        """Master, at start (after ``preload_app`` loaded the app): stop any cron running here."""
        self._nothing_runs_in_master(server)

    def on_reload(self, server: Server) -> None:
        """Master, on HUP: the workers forked next are a new generation."""
        _GENERATIONS.reloaded()

    def pre_fork(self, server: Server, worker: Worker) -> None:
        """Master, before each fork: stop any cron running here, so no worker is forked from one."""
        self._nothing_runs_in_master(server)

    def _nothing_runs_in_master(self, server: Server) -> None:
        for cron in _running_crons():
            server.log.warning(
                "leasecron: LeaseCron %r was running in the gunicorn master (pid %d): stopping it there. The master"
                " runs no job; each worker starts the cron after the fork (post_fork). Do not call start() at import"
                " time of an app that gunicorn preloads (preload_app).",
                cron.runner,
                os.getpid(),
            )
            cron.stop()

    # -- each worker ---------------------------------------------------------------------

    def post_fork(self, server: Server, worker: Worker) -> None:
        """Worker, right after the fork: import the target and start the cron."""
        self._generation = _GENERATIONS.reloads
        cron = self._cron = self.cron()
        cron.start()
        _GENERATIONS.start(self._generation)
        worker.log.info("leasecron: worker %d runs %r", os.getpid(), cron)
        wanted = cron.stop_timeout_ms / 1000
        allowed = self._stop_allowed(worker.cfg)
        if wanted > allowed:
            worker.log.warning(
                "leasecron: the cron's stop_timeout_ms (%d) is more than gunicorn allows a stopping worker"
                " (graceful_timeout %s s, timeout %s s, less %.1f s): a stopping worker waits %.1f s for its handlers",
                cron.stop_timeout_ms,
                worker.cfg.graceful_timeout,
                worker.cfg.timeout,
                STOP_MARGIN_S,
                allowed,
            )

    def worker_abort(self, worker: Worker) -> None:
        """Worker, killed for its timeout (SIGABRT): the stop in ``worker_exit`` will be short."""
        self._aborted = True

    def worker_exit(self, server: Server, worker: Worker) -> None:
        """Worker, on its way out: once a reload's new worker runs the cron, stop it, handing
        every live run over to a backup."""
        cron = self._cron
        if cron is None or getattr(worker, "pid", None) != os.getpid():
            return  # the cron never started here, or gunicorn calls this in the master for a vanished worker
        allowed = ABORT_STOP_S if self._aborted else self._stop_allowed(worker.cfg)
        began = time.monotonic()
        hurry: List[int] = []  # a signal handler only appends: no lock is taken in it

        def quick(signum: int, frame: Any) -> None:
            hurry.append(signum)

        previous = _set_signals(quick, signal.SIG_IGN)
        try:
            if not self._aborted and _GENERATIONS.reloads > self._generation and os.getppid() == worker.ppid:
                self._linger(worker, min(LINGER_MAX_S, allowed / 2), hurry)
            _set_signals(signal.SIG_IGN, signal.SIG_IGN)
            timeout = min(cron.stop_timeout_ms / 1000, max(0.0, allowed - (time.monotonic() - began)))
            worker.log.info("leasecron: worker %d stopping its cron (waits up to %.1f s)", os.getpid(), timeout)
            cron.stop(timeout=timeout)
        finally:
            _restore_signals(previous)

    def _linger(self, worker: Worker, most_s: float, hurry: List[int]) -> None:
        """Keep the cron running until a worker of a newer generation started its own, at most
        ``most_s``, or until INT or QUIT (a quick shutdown) lands in ``hurry``."""
        deadline = time.monotonic() + most_s
        worker.log.info(
            "leasecron: worker %d runs its cron until a new worker runs one (at most %.1f s)", os.getpid(), most_s
        )
        while _GENERATIONS.started <= self._generation:
            if hurry or time.monotonic() >= deadline:
                worker.log.warning(
                    "leasecron: worker %d stops its cron with no new worker running one (%s)",
                    os.getpid(),
                    "quick shutdown" if hurry else f"waited {most_s:.1f} s",
                )
                return
            time.sleep(_LINGER_POLL_S)

    @staticmethod
    def _stop_allowed(cfg: Any) -> float:
        """How long a stopping worker may wait before the master kills it, less the margin."""
        limits = [float(cfg.graceful_timeout)]
        if cfg.timeout:  # the master's timeout check goes on for the workers a reload replaces
            limits.append(float(cfg.timeout))
        return max(0.0, min(limits) - STOP_MARGIN_S)


def hooks(target: Union[str, LeaseCron]) -> Dict[str, Callable[..., None]]:
    """gunicorn's server hooks that run ``target``'s cron in the workers, by setting name.

    ``globals().update(hooks("app:cron"))`` in ``gunicorn.conf.py`` installs
    ``on_starting``, ``on_reload``, ``pre_fork``, ``post_fork``,
    ``worker_abort`` and ``worker_exit``. See :class:`GunicornHooks`.
    """
    return GunicornHooks(target).as_dict()


_Handler = Any  # a signal handler: a callable, SIG_IGN or SIG_DFL


def _set_signals(quick: _Handler, term: _Handler) -> Dict[int, Any]:
    """INT and QUIT (a quick shutdown) to ``quick``, TERM to ``term`` (main thread only); the
    handlers they had."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    wanted = {signal.SIGINT: quick, signal.SIGQUIT: quick, signal.SIGTERM: term}
    return {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}


def _restore_signals(previous: Dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
