"""The live runs: the attempts this instance won and executes, from the win until their threads are done.

A won claim starts a :class:`~leasecron.engine.live.LiveRun` here; once the
instance stops (:meth:`LiveRuns.close`), a claim still in flight that wins is
released at once instead (a hand-over costs no attempt).

The live runs' *keeper* is one timer for them all, not a few per run: it is
planned at the earliest time a live run needs looking at (its first
heartbeat, its local deadline, its timeout), and there it lets each run act on
what fell due (:meth:`~leasecron.engine.live.LiveRun.keep`) and plans itself
again. A run that ends before its first heartbeat, as most do, costs the
scheduler thread nothing.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Union

from ..events import SlotText, log
from ..jobs import Job
from ..runs import Run, RunBrief
from ..states import Reason
from .finishes import Finishes
from .live import LiveRun, RunSupport
from .returns import Returns
from .roles import Instance, RunKey, Threads

__all__ = ["LiveRuns"]


class LiveRuns:
    """The runs executing on ``instance``, by (job, slot_ms), under a lock of its own; their
    handlers and heartbeat loops run on ``workers``."""

    def __init__(self, instance: Instance, workers: Threads) -> None:
        self._instance = instance
        self._support = RunSupport(instance, workers, self, Finishes(instance.store, workers), Returns(instance))
        self._lock = threading.Lock()
        self._live: Dict[RunKey, LiveRun] = {}
        self._closed = False
        #: When the keeper is planned (monotonic s), None when it is not.
        self._keeper_due: Optional[float] = None

    def start(self, job: Job, run: Run, claim_sent: float) -> None:
        """Execute ``run``, won by a claim sent at the monotonic time ``claim_sent`` (its local
        deadline counts from then); once closed, release it instead."""
        ids = (run.job, SlotText(run.slot_ms), run.attempt, run.runner, run.reason)
        with self._lock:
            closed = self._closed
            if not closed:
                live = LiveRun(self._support, job, run, claim_sent)
                self._live[live.key] = live
        if closed:  # won while stopping: hand it straight back, it costs no attempt
            log.info("leasecron: won job %r slot %s attempt %d runner %r (%s) while stopping: releasing it", *ids)
            try:
                self._instance.store.release(run.job, run.slot_ms, run.token)
            except Exception as exc:  # noqa: BLE001 - a backup takes it over when the lease runs out
                log.warning("leasecron: could not release job %r slot %s attempt %d runner %r (%s): %s", *ids, exc)
            return
        if run.reason == Reason.TAKEOVER:
            log.info("leasecron: took over job %r slot %s attempt %d runner %r (%s)", *ids)
        else:
            log.info("leasecron: won job %r slot %s attempt %d runner %r (%s)", *ids)
        self._instance.events.emit_run("start", run, reason=run.reason)
        live.start()
        self.plan(live.keep(self._instance.clock.monotonic()))

    def plan(self, due: Optional[float]) -> None:
        """Have the keeper look at the live runs at the monotonic time ``due`` (or sooner; None:
        nothing to look at)."""
        if due is None:
            return
        with self._lock:
            if self._keeper_due is not None and self._keeper_due <= due:
                return
            self._keeper_due = due
        self._instance.timers.call_at_monotonic(due, self._keep)

    def _keep(self) -> None:
        """The keeper, in the scheduler thread: each live run acts on what fell due; planned again
        at the earliest time one needs looking at."""
        now = self._instance.clock.monotonic()
        with self._lock:
            self._keeper_due = None
            live = list(self._live.values())
        dues = [due for due in (run.keep(now) for run in live) if due is not None]
        self.plan(min(dues) if dues else None)

    def ended(self, live: LiveRun) -> None:
        """``live``'s threads are done with it: no thread of it touches the store any more."""
        with self._lock:
            if self._live.get(live.key) is live:
                del self._live[live.key]

    def is_live(self, key: RunKey) -> bool:
        """Whether the run ``key`` is live here."""
        return key in self._live

    def holds(self, run: Union[Run, RunBrief]) -> bool:
        """Whether ``run``'s current attempt (its token) is one this instance executes."""
        with self._lock:
            return any(live.run.token == run.token for live in self._live.values())

    def runs(self) -> List[Run]:
        """The runs executing now."""
        with self._lock:
            return [live.run for live in self._live.values()]

    def close(self) -> List[LiveRun]:
        """Start no run any more (a run won from now on is released); the live runs now."""
        with self._lock:
            self._closed = True
            return list(self._live.values())

    def left(self) -> List[LiveRun]:
        """The live runs still executing (after a stop waited for them)."""
        with self._lock:
            return list(self._live.values())
