"""A store that passes every call on to another: the base of wrappers that observe calls.

:class:`DelegatingStore` implements the whole :class:`~leasecron.Store`
contract by calling the same method of an *inner* store, with the same
arguments, and returning its answer (or letting its exception through)
unchanged. Its public methods are :class:`~leasecron.Store`'s: they check
the arguments, once, and call the protected methods (``_claim``,
``_heartbeat``, ...), which this class passes on to the inner store's
protected methods, so that nothing is checked twice. A wrapper subclasses
it and overrides only the protected methods it watches, calling
``super()``::

    class TimedStore(DelegatingStore):
        def _claim(self, request: ClaimRequest) -> Claim:
            began = time.perf_counter()
            try:
                return super()._claim(request)
            finally:
                claim_seconds.observe(time.perf_counter() - began)

    cron = LeaseCron(TimedStore(open_store(url)))

The wrapper is the store the engine sees, so it sees every call an instance
makes. What it forwards: every operation of the contract (``now_ms``,
``claim``, ``claim_many``, ``heartbeat``, ``finish``, ``release``, ``pause``,
``resume``, ``job_state``, ``job_states``, ``request_run``,
``pending_requests``, ``get_run``, ``unfinished``, ``runs``, ``recent_runs``,
``jobs``, ``close``), the ``check`` helpers
(``server_version``, ``durability_warnings``) and ``kind``. A backend's own
attributes (say a ``RedisStore``'s ``client``) are not forwarded, so that a
type checker still catches a misspelt name: read them from
:attr:`DelegatingStore.inner`. ``repr()`` shows the wrapper around the inner
store's.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ..errors import ConfigError
from ..controls import JobState, ManualRequest
from ..runs import Claim, Run
from .base import ClaimRequest, Store

__all__ = ["DelegatingStore"]


class DelegatingStore(Store):
    """Every :class:`~leasecron.Store` operation passed on unchanged to ``inner``."""

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

    def _jobs(self) -> List[str]:
        """The inner store's job names."""
        return self.inner._jobs()

    def server_version(self) -> str:
        """The inner store's server version."""
        return self.inner.server_version()

    def durability_warnings(self) -> List[str]:
        """The inner store's durability warnings."""
        return self.inner.durability_warnings()

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.inner!r}>"
