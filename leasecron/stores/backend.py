"""The protected half of the store contract: what a backend implements (:class:`StoreBackend`).

:class:`~leasecron.Store`'s public methods check their arguments once and call these; a backend
(or a wrapper, see :class:`~leasecron.stores.DelegatingStore`) implements them and may trust the
arguments. The rules they carry out are stated, with their numbers, on the public methods.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, List, Optional

from ..announcements import Announcement
from ..controls import JobState, ManualRequest
from ..runs import Claim
from ..stored import Poll, StoredSchedule
from .claim_request import ClaimRequest
from .finish_request import Finish
from .reads import StoreReads

__all__ = ["StoreBackend"]


class StoreBackend(StoreReads):
    """The protected operations of :class:`~leasecron.Store`, each named after its public method."""

    # -- what a backend implements -------------------------------------------------------
    #
    # The arguments are those of the public method, checked: a backend trusts them. A wrapper
    # (see DelegatingStore) overrides these, never the public methods, so that every argument is
    # checked once, by the outermost store.

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """:meth:`claim_many` with checked arguments (at least one request): one
        :meth:`_claim` after the other unless the backend does better."""
        return [self._claim(request) for request in requests]

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """:meth:`finish_many` with checked finishes (at least one): one :meth:`_finish` after
        the other unless the backend does better."""
        return [self._finish(*finish) for finish in finishes]

    def _poll_announcing(self, since: int, announce: Announcement) -> Poll:
        """:meth:`poll` with an announcement: :meth:`_announce`, then :meth:`_poll`, unless the backend does better."""
        self._announce(announce)
        return self._poll(since)

    @abc.abstractmethod
    def _announce(self, announcement: Announcement) -> None:
        """:meth:`announce`."""

    @abc.abstractmethod
    def _withdraw(self, runner: str) -> None:
        """:meth:`withdraw`."""

    @abc.abstractmethod
    def _claim(self, request: ClaimRequest) -> Claim:
        """:meth:`claim`, by rules 1-12, of a checked request."""

    @abc.abstractmethod
    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        """:meth:`heartbeat`, by rule 13."""

    @abc.abstractmethod
    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        """:meth:`finish`, by rule 14."""

    @abc.abstractmethod
    def _record_return(
        self, job: str, slot_ms: int, attempt: int, runner: str, returned_ms: int, status: str, error: Optional[str]
    ) -> bool:
        """:meth:`record_return`, by rule 26."""

    @abc.abstractmethod
    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        """:meth:`release`, by rule 15."""

    @abc.abstractmethod
    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        """:meth:`pause`, by rule 18."""

    @abc.abstractmethod
    def _resume(self, job: str, by: str) -> JobState:
        """:meth:`resume`, by rule 18."""

    @abc.abstractmethod
    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        """:meth:`request_run`, by rule 19."""

    @abc.abstractmethod
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
        """:meth:`set_schedule`, by rule 24, with its fields as the store keeps them."""
