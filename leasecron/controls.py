"""What a store holds of a job beyond its runs: whether it is paused, and its requests for
manual runs. Operators set them (``pause``, ``resume``, ``trigger``) through the store, so they
act on every instance at once, also from a process that runs no job.

* A *pause* is kept per job: who paused it, when (on the store's clock) and a note. A new
  scheduled or catch-up claim of a paused job is answered ``paused``, inside the same atomic
  claim; a run already running goes on, and can still be taken over.
* A *request* asks for one manual run of a job now: its slot is the store's clock at the
  request. An instance that has the job registered finds it with one store call per
  ``poll_ms`` for all its jobs, and claims it with reason ``manual``; that claim consumes the
  request, so exactly one instance runs it. A request nobody claimed by ``expires_ms``
  (``max_late_ms + 10 s`` after it was made) has expired.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from .runs import slot_datetime
from .states import RequestState

__all__ = ["ManualRequest", "JobState"]


@dataclasses.dataclass(frozen=True)
class ManualRequest:
    """A request for one manual run of ``job`` at ``slot_ms`` (the store's clock when it was
    made), by ``requested_by``. ``state`` is a :class:`~leasecron.states.RequestState` value,
    judged on the store's clock when the request was read: a ``pending`` request whose
    ``expires_ms`` has passed reads as ``expired``."""

    job: str
    slot_ms: int
    requested_by: str
    expires_ms: int
    state: str

    @property
    def pending(self) -> bool:
        """True while an instance may still claim the request."""
        return self.state == RequestState.PENDING

    def to_dict(self) -> dict[str, object]:
        """The request as plain JSON-ready values (``slot`` as ISO 8601 text)."""
        data = dataclasses.asdict(self)
        data["slot"] = slot_datetime(self.slot_ms).isoformat()
        return data


@dataclasses.dataclass(frozen=True)
class JobState:
    """What a store holds of ``job`` beyond its runs.

    ``paused``, and while paused who paused it (``paused_by``), when on the
    store's clock (``paused_ms``) and why (``note``); ``requests``: its
    requests for manual runs that a store still keeps (pending ones, and the
    recently claimed, skipped or expired), oldest slot first.
    """

    job: str
    paused: bool = False
    paused_by: Optional[str] = None
    paused_ms: Optional[int] = None
    note: Optional[str] = None
    requests: Tuple[ManualRequest, ...] = ()

    @property
    def pending(self) -> Tuple[ManualRequest, ...]:
        """The requests an instance may still claim."""
        return tuple(r for r in self.requests if r.pending)

    def to_dict(self) -> dict[str, object]:
        """The state as plain JSON-ready values."""
        data = dataclasses.asdict(self)
        data["requests"] = [r.to_dict() for r in self.requests]
        return data
