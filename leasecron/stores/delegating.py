"""A store that passes every call on to another: :class:`DelegatingStore`, the base of wrappers.

A wrapper subclasses it and overrides only the protected methods it watches (``_claim``,
``_heartbeat``, ...), calling ``super()``. The one idea: the public methods check the arguments
once, as every :class:`~leasecron.Store`'s do, and the protected ones pass them on to the inner
store's protected methods, so nothing is checked twice. ``docs/stores.rst`` (Wrapping a store)
shows a wrapper.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..announcements import Announcement, LiveInstance
from ..errors import ConfigError
from ..controls import JobState, ManualRequest
from ..runs import Claim, Run
from ..stored import Overview, Poll, ScheduleChanges, StoredSchedule
from .base import ClaimRequest, Finish, Store

__all__ = ["DelegatingStore"]


class DelegatingStore(Store):
    """Every :class:`~leasecron.Store` operation passed on unchanged to ``inner``.

    Each call goes to the same method of ``inner`` with the same arguments, and its answer (or
    its exception) comes back unchanged: every operation of the contract, ``close``, the
    ``check`` helpers (``server_version``, ``durability_warnings``) and ``kind``. A backend's
    own attributes (say a ``RedisStore``'s ``client``) are not forwarded, so that a type checker
    still catches a misspelt name: read them from :attr:`inner`. ``repr()`` shows the wrapper
    around the inner store's.
    """

    def __init__(self, inner: Store) -> None:
        if not isinstance(inner, Store):
            raise ConfigError(f"{type(self).__name__} wraps a leasecron Store, not {inner!r}")
        #: The store every call is passed on to.
        self.inner = inner
        self.kind = inner.kind

    def now_ms(self) -> int:
        """The inner store's clock."""
        return self.inner.now_ms()

    def _claim(self, request: ClaimRequest) -> Claim:
        """The inner store's claim."""
        return self.inner._claim(request)

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """The inner store's batch of claims."""
        return self.inner._claim_many(requests)

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        """The inner store's heartbeat."""
        return self.inner._heartbeat(job, slot_ms, token, lease_ms)

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        """The inner store's finish."""
        return self.inner._finish(job, slot_ms, token, status, error)

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """The inner store's batch of finishes."""
        return self.inner._finish_many(finishes)

    def _record_return(
        self, job: str, slot_ms: int, attempt: int, runner: str, returned_ms: int, status: str, error: Optional[str]
    ) -> bool:
        """The inner store's record of a return."""
        return self.inner._record_return(job, slot_ms, attempt, runner, returned_ms, status, error)

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        """The inner store's release."""
        return self.inner._release(job, slot_ms, token)

    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        """The inner store's pause."""
        return self.inner._pause(job, by, note)

    def _resume(self, job: str, by: str) -> JobState:
        """The inner store's resume."""
        return self.inner._resume(job, by)

    def _job_state(self, job: str) -> JobState:
        """The inner store's state of ``job``."""
        return self.inner._job_state(job)

    def _job_states(self) -> List[JobState]:
        """The inner store's job states."""
        return self.inner._job_states()

    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        """The inner store's request for a manual run."""
        return self.inner._request_run(job, by, max_late_ms)

    def _pending_requests(self) -> List[ManualRequest]:
        """The inner store's pending requests."""
        return self.inner._pending_requests()

    def _set_schedule(
        self,
        job: str,
        by: str,
        source: str,
        schedule: Optional[str],
        tz: Optional[str],
        task: Optional[str],
        kwargs: Dict[str, Any],
        options: Dict[str, Any],
    ) -> StoredSchedule:
        """The inner store's change of a stored schedule."""
        return self.inner._set_schedule(job, by, source, schedule, tz, task, kwargs, options)

    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        """The inner store's stored schedule of ``job``."""
        return self.inner._stored_schedule(job)

    def _schedule_changes(self, since: int) -> ScheduleChanges:
        """The inner store's schedule changes."""
        return self.inner._schedule_changes(since)

    def _poll(self, since: int) -> Poll:
        """The inner store's poll."""
        return self.inner._poll(since)

    def _poll_announcing(self, since: int, announce: Announcement) -> Poll:
        """The inner store's poll with an announcement (its one round trip); a wrapper that
        overrides :meth:`_poll` sees every poll: :meth:`_announce`, then its :meth:`_poll`."""
        if type(self)._poll is not DelegatingStore._poll:
            self._announce(announce)
            return self._poll(since)
        return self.inner._poll_announcing(since, announce)

    @property
    def instance_ttl_ms(self) -> int:  # noqa: D102 - the inner store's, which keeps the announcements
        return self.inner.instance_ttl_ms

    @instance_ttl_ms.setter
    def instance_ttl_ms(self, ttl_ms: int) -> None:
        self.inner.instance_ttl_ms = ttl_ms

    def _announce(self, announcement: Announcement) -> None:
        """The inner store's announce."""
        self.inner._announce(announcement)

    def _withdraw(self, runner: str) -> None:
        """The inner store's withdraw."""
        self.inner._withdraw(runner)

    def _instances(self) -> List[LiveInstance]:
        """The inner store's live instances."""
        return self.inner._instances()

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        """The inner store's run of ``job`` at ``slot_ms``."""
        return self.inner._get_run(job, slot_ms)

    def _unfinished(self, job: str) -> List[Run]:
        """The inner store's running runs of ``job``."""
        return self.inner._unfinished(job)

    def _runs(self, job: str, limit: int) -> List[Run]:
        """The inner store's runs of ``job``."""
        return self.inner._runs(job, limit)

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        """The inner store's newest runs of ``jobs`` (its own round trip, not one per job)."""
        return self.inner._recent_runs(jobs, limit)

    def _overview(self, jobs: List[str]) -> Overview:
        """The inner store's overview (its own round trips, not the reads one by one)."""
        return self.inner._overview(jobs)

    def _jobs(self) -> List[str]:
        """The inner store's job names."""
        return self.inner._jobs()

    def server_version(self) -> str:
        """The inner store's server version."""
        return self.inner.server_version()

    def durability_warnings(self) -> List[str]:
        """The inner store's durability warnings."""
        return self.inner.durability_warnings()

    def replication(self) -> List[str]:
        """How the inner store's writes are copied."""
        return self.inner.replication()

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.inner!r}>"
