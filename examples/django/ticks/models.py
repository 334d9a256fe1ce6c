"""What each run of the job leaves in the database: one row per attempt."""
from typing import Any, Dict

from django.db import models


class Tick(models.Model):
    """One attempt of a slot: who ran it and how it ended (``running``, ``done`` or ``aborted``)."""

    slot_ms = models.BigIntegerField()
    attempt = models.IntegerField()
    reason = models.CharField(max_length=20)
    runner = models.CharField(max_length=200)
    outcome = models.CharField(max_length=20, default="running")
    started = models.DateTimeField(auto_now_add=True)

    def as_dict(self) -> Dict[str, Any]:
        return {"slot_ms": self.slot_ms, "attempt": self.attempt, "reason": self.reason, "runner": self.runner,
                "outcome": self.outcome}  # fmt: skip
