"""Backups: the runs (and slots) an instance watches, to take them over if they need it.

An instance backs a run up when its claim finds it held elsewhere
(``running``), when a new slot overlaps it (``overlap``: both are backed up),
and at start for each unfinished run of its jobs. Each check is a takeover
claim (:meth:`Claims.watch <leasecron.engine.claims.Claims.watch>` plans
them); :meth:`Backups.again` decides from its answer whether the run may still
need this instance, so a run whose runner died is taken over within two
heartbeats of its lease's end.
"""

from __future__ import annotations

import threading
from typing import Dict, Optional, Set

from ..jobs import Job
from ..runs import LATE_TOLERANCE_MS, Claim
from ..states import Outcome
from .clock import StoreClock
from .roles import Claimable, RunKey, Starter

__all__ = ["Backups"]


class Backups:
    """The (job, slot_ms) this instance backs up, under a lock of its own.

    ``roster`` and ``live`` say whether a run may be backed up (the job is
    scheduled here, the instance is not stopping, the run is not live here);
    ``clock`` tells how long a slot without a run may still be claimed.
    """

    def __init__(self, roster: Claimable, live: Starter, clock: StoreClock) -> None:
        self._roster = roster
        self._live = live
        self._clock = clock
        self._lock = threading.Lock()
        #: The slots backed up, by job name (a job's are found without looking at the others').
        self._slots: Dict[str, Set[int]] = {}

    def add(self, job: Job, slot_ms: int) -> bool:
        """Back up the run at ``slot_ms``; False when it is backed up already or may not be."""
        with self._lock:
            if self.watched(job.name, slot_ms) or not self._may_watch(job, slot_ms):
                return False
            self._slots.setdefault(job.name, set()).add(slot_ms)
            return True

    def again(self, job: Job, slot_ms: int, claim: Optional[Claim]) -> bool:
        """After a check answered ``claim`` (None: no answer): whether to check again. The run is
        forgotten when it may no longer need this instance: it ended, it runs here, or its slot
        can no longer be claimed."""
        if claim is None:
            keep = True
        elif claim.outcome == Outcome.RUNNING:
            found = claim.found
            keep = found is not None and not self._live.holds(found)
        elif claim.outcome == Outcome.NONE:  # nobody claimed the slot yet; it may still be claimed
            keep = self._clock.now_ms() <= slot_ms + job.options.max_late_ms + LATE_TOLERANCE_MS
        else:
            keep = False
        with self._lock:
            if keep and self.watched(job.name, slot_ms) and self._may_watch(job, slot_ms):
                return True
            self._discard((job.name, slot_ms))
            return False

    def watched(self, name: str, slot_ms: int) -> bool:
        """Whether the run of the job ``name`` at ``slot_ms`` is backed up."""
        slots = self._slots.get(name)
        return slots is not None and slot_ms in slots

    def forget(self, key: RunKey) -> None:
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

    def _may_watch(self, job: Job, slot_ms: int) -> bool:
        """Under the lock: the job is scheduled here, the instance not stopping, the run not live here."""
        return self._roster.may_claim(job) and not self._live.is_live((job.name, slot_ms))

    def _discard(self, key: RunKey) -> None:
        """Under the lock: stop backing up the run ``key``."""
        slots = self._slots.get(key[0])
        if slots is not None:
            slots.discard(key[1])
            if not slots:
                del self._slots[key[0]]
