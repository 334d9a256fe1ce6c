"""The arguments of one claim, as one value: what a backend's ``_claim`` decides on."""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["ClaimRequest"]


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """The arguments of one claim, as :meth:`~leasecron.Store.claim` checked them: what
    :meth:`Store._claim <leasecron.Store._claim>` decides on. Each field is the argument of
    :meth:`~leasecron.Store.claim` of the same name (the defaults are written there)."""

    job: str
    slot_ms: int
    runner: str
    reason: str
    lease_ms: int
    max_attempts: int
    max_late_ms: int
    overlap: str
    history_size: int
    token: Optional[str]
