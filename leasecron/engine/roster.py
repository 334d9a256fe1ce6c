"""The roster: the jobs a started instance schedules, by name, and whether it stops.

Every part asks the roster before it claims (:meth:`Roster.may_claim`): a job
removed (``remove_job``), or replaced by another job registered under its
name, is no longer claimed here, and once the instance stops nothing new is.
"""

from __future__ import annotations

import threading
from typing import Dict, Iterable, Optional

from ..jobs import Job

__all__ = ["Roster"]


class Roster:
    """The jobs scheduled here (what may be claimed), under a lock of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: Dict[str, Job] = {}
        self._stopping = False

    def add(self, jobs: Iterable[Job]) -> None:
        """Schedule ``jobs`` here (a job of the same name is replaced)."""
        with self._lock:
            self._jobs.update((job.name, job) for job in jobs)

    def remove(self, job: Job) -> bool:
        """Stop scheduling ``job``; False when another job holds its name now (it is left alone)."""
        with self._lock:
            if self._jobs.get(job.name) is not job:
                return False
            del self._jobs[job.name]
            return True

    def stop(self) -> bool:
        """From now on nothing is claimed; True for the first call."""
        with self._lock:
            first = not self._stopping
            self._stopping = True
            return first

    @property
    def stopping(self) -> bool:
        """Whether the instance stops."""
        return self._stopping

    def may_claim(self, job: Job) -> bool:
        """Whether a claim of ``job`` may be sent now: scheduled here, and the instance not stopping."""
        return not self._stopping and self._jobs.get(job.name) is job

    def get(self, name: str) -> Optional[Job]:
        """The job scheduled here under ``name``, or None."""
        return self._jobs.get(name)
