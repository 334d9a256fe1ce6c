"""The arguments of one claim, as one value: what a backend's ``_claim`` decides on."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..options import DEFAULTS
from ..states import Outcome, Reason

__all__ = ["ClaimRequest", "BRIEF_OUTCOMES"]

#: The answers that are brief when a claim asks so (:attr:`ClaimRequest.brief`).
BRIEF_OUTCOMES = (Outcome.RUNNING, Outcome.DONE)


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """The arguments of one claim: what :meth:`Store._claim <leasecron.Store._claim>` decides on,
    and what :meth:`~leasecron.Store.claim_one` takes (:meth:`~leasecron.Store.claim_many`, one per
    claim). Each field is the argument of :meth:`~leasecron.Store.claim` of the same name, with the
    same default: the job option's default (:data:`leasecron.options.DEFAULTS`), written there only;
    ``brief`` is this request's own."""

    job: str
    slot_ms: int
    runner: str
    reason: str = Reason.SCHEDULE
    lease_ms: int = DEFAULTS["lease_ms"]
    max_attempts: int = DEFAULTS["max_attempts"]
    max_late_ms: int = DEFAULTS["max_late_ms"]
    overlap: str = DEFAULTS["overlap"]
    history_size: int = DEFAULTS["history_size"]
    token: Optional[str] = None
    #: The version of the job's stored schedule the slot was computed from (rule 23; 0: the code's).
    version: int = 0
    #: Whether a ``running`` or ``done`` answer may be brief: its :attr:`~leasecron.Claim.brief`
    #: (a :class:`~leasecron.runs.RunBrief`) in place of the whole run. The engine asks so: a losing
    #: claim is then cheaper to read back. Every other answer carries the whole run.
    brief: bool = False

    def answers_brief(self, outcome: str) -> bool:
        """Whether this claim's answer ``outcome`` carries a :class:`~leasecron.runs.RunBrief` in
        place of the whole run (every store decides it here)."""
        return self.brief and outcome in BRIEF_OUTCOMES
