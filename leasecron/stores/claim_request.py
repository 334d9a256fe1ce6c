"""The arguments of one claim, as one value: what a backend's ``_claim`` decides on."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..states import Reason

__all__ = ["ClaimRequest"]


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """The arguments of one claim: what :meth:`Store._claim <leasecron.Store._claim>` decides
    on, and what :meth:`~leasecron.Store.claim_many` takes, one per claim. Each field is the
    argument of :meth:`~leasecron.Store.claim` of the same name, with the same default."""

    job: str
    slot_ms: int
    runner: str
    reason: str = Reason.SCHEDULE
    lease_ms: int = 30_000
    max_attempts: int = 3
    max_late_ms: int = 30_000
    overlap: str = "skip"
    history_size: int = 100
    token: Optional[str] = None
