"""Backups: the runs (and slots) an instance watches, to take them over if they need it.

An instance becomes a *backup* of a run when its claim finds the run held
elsewhere (``running``), when a new slot overlaps it (``overlap``: the
instance backs up both), and at start for each unfinished run of its jobs
(catch-up). A backup checks the run with a takeover claim after a uniform
random 1–2 heartbeats (sooner when asked), and again and again while the run
may need it: while another instance holds it, and, for a slot without a run
yet (``none``), while the slot may still be claimed (until ``max_late_ms`` +
10 s after it). A check that wins starts a live run here (the engine's claim
path does that); ``done``, or the run held by this instance itself, ends the
backup. So a run whose runner died is taken over within two heartbeats of its
lease's end. A backup ends without a check, too, once a later slot of the job
is found run (not by a manual claim) under ``overlap="skip"``: the earlier
runs cannot be taken over any more, and a job that runs more often than its
backups check costs the losers of its claims no check at all.
"""

from __future__ import annotations

import random
import threading
from typing import Callable, Dict, Optional, Set, Tuple

from ..jobs import Job
from ..runs import LATE_TOLERANCE_MS, Claim, Run
from ..states import Outcome

__all__ = ["Backups"]

Key = Tuple[str, int]


class Backups:
    """The (job, slot_ms) this instance backs up, and their checks.

    ``lock`` is the engine's, which also guards its live runs: a run won
    here stops being backed up at the moment it becomes live. ``later(delay_ms,
    fn, *args)`` calls ``fn`` later (the scheduler), ``submit`` runs a check in
    the claim pool; ``check`` sends a takeover claim (None: no answer);
    ``may_watch(job, key)`` says, under ``lock``, whether the instance may
    back a run up now (it is not stopping, the run is not live here, the job
    is scheduled here); ``holds(run)``, under ``lock``, whether ``run`` is
    one this instance executes; ``now_ms`` reads the store's clock.
    """

    def __init__(
        self,
        lock: "threading.RLock",
        *,
        later: Callable[..., None],
        submit: Callable[..., None],
        check: Callable[[Job, int], Optional[Claim]],
        may_watch: Callable[[Job, Key], bool],
        holds: Callable[[Run], bool],
        now_ms: Callable[[], int],
    ) -> None:
        self._lock = lock
        self._later = later
        self._submit = submit
        self._check = check
        self._may_watch = may_watch
        self._holds = holds
        self._now_ms = now_ms
        #: The slots backed up, by job name (a job's are found without looking at the others').
        self._slots: Dict[str, Set[int]] = {}

    def watch(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        """Become a backup of the run at ``slot_ms`` (idempotent): check it after ``delay_ms``
        (default: a random 1-2 heartbeats), and again and again while it may need us."""
        key = (job.name, slot_ms)
        with self._lock:
            if self._watched(key) or not self._may_watch(job, key):
                return
            self._slots.setdefault(job.name, set()).add(slot_ms)
        self._plan(job, slot_ms, delay_ms)

    def forget(self, key: Key) -> None:
        """Stop backing up the run ``key`` (it is live here now)."""
        with self._lock:
            self._discard(key)

    def forget_before(self, name: str, slot_ms: int) -> None:
        """Stop backing up the runs and slots of the job ``name`` before ``slot_ms``: a run of
        ``slot_ms`` started, not by a manual claim, under ``overlap="skip"``, so every earlier
        run had ended or was marked interrupted then (rules 10 and 11), and no earlier slot can
        be claimed any more (rules 4 and 9): a check would only answer ``done``, ``none`` or
        ``late``."""
        with self._lock:
            slots = self._slots.get(name)
            if slots and min(slots) < slot_ms:
                slots.difference_update([slot for slot in slots if slot < slot_ms])
                if not slots:
                    del self._slots[name]

    def forget_job(self, name: str) -> None:
        """Stop backing up every run of the job ``name``."""
        with self._lock:
            self._slots.pop(name, None)

    def clear(self) -> None:
        """Stop backing up anything (the instance stops)."""
        with self._lock:
            self._slots.clear()

    def _plan(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        if delay_ms is None:
            delay_ms = random.uniform(1, 2) * job.options.heartbeat_ms
        self._later(delay_ms, self._submit, self._check_once, job, slot_ms)

    def _check_once(self, job: Job, slot_ms: int) -> None:
        """A backup's check: a takeover claim; stay its backup while the run may need us."""
        key = (job.name, slot_ms)
        with self._lock:
            if not self._watched(key):
                return
        claim = self._check(job, slot_ms)
        keep: bool
        if claim is None:
            keep = True
        elif claim.outcome == Outcome.RUNNING:
            with self._lock:
                keep = claim.run is not None and not self._holds(claim.run)
        elif claim.outcome == Outcome.NONE:  # nobody claimed the slot yet; it may still be claimed
            keep = self._now_ms() <= slot_ms + job.options.max_late_ms + LATE_TOLERANCE_MS
        else:
            keep = False
        with self._lock:
            if keep and self._watched(key) and self._may_watch(job, key):
                self._plan(job, slot_ms)
            else:
                self._discard(key)

    def _watched(self, key: Key) -> bool:
        """Under the lock: whether the run ``key`` is backed up."""
        slots = self._slots.get(key[0])
        return slots is not None and key[1] in slots

    def _discard(self, key: Key) -> None:
        """Under the lock: stop backing up the run ``key``."""
        slots = self._slots.get(key[0])
        if slots is not None:
            slots.discard(key[1])
            if not slots:
                del self._slots[key[0]]
