"""The schedule changes of the synthetic clean run (:func:`tests.chaos.sim.clean_run`): no processes.

* timeout2 is rescheduled to every 4 s at 6900 (version 1, stored at 6900) and reset at 9500
  (version 2): B, which has not polled the change, claims timeout2@8000 from version 0 and is
  answered ``stale`` (it logs ``skip``, reason ``rescheduled``); C claims the same slot, one both
  schedules share, from version 1 and runs it;
* stored1 (task chaos-stored, every 1 s) is put at 3400 (version 1, stored at 3400) and deleted at
  8000 (version 2): B runs stored1@5000, C stored1@6000, the slots due once the instances had
  polled the put (poll 1000 ms) and before the delete was sent; C's claim of stored1@9000, from
  version 1 after the delete, is answered ``stale``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:
    from .sim import Sim

__all__ = ["PUT", "answer", "ran", "schedules", "versioned"]

#: The operator's put of stored1 (fields of its line).
PUT = {"schedule": "1", "tz": None, "task": "chaos-stored", "kwargs": {"n": 1}, "options": {"overlap": "allow"}}


def answer(version: int, updated_ms: int, source: str) -> Dict[str, Any]:
    """The store's answer to a change, as the operator logs it."""
    return {"version": version, "updated_ms": updated_ms, "source": source, "updated_by": "chaos-operator"}


def versioned(line: Dict[str, Any], version: int, started: Optional[int] = None) -> Dict[str, Any]:
    """Give a claim line the version its slot was computed from (and a won run its start)."""
    line["version"] = version
    if started is not None:
        line["run_started_ms"] = started
    return line


def ran(sim: "Sim", runner: str, job: str, slot: int, token: str, ms: int = 200) -> None:
    """``runner``'s handler runs attempt 1 of ``job@slot`` for ``ms`` and succeeds: its lines, the
    record with its attempt, and the sink."""
    sim.run(runner, job, slot, 1, token, slot + 2, slot + ms)
    sim.record(job, slot, 1, token, runner, "success")
    sim.attempts(job, slot, (1, runner, "schedule", slot, slot + ms + 1, "success"))
    sim.sink_from_records()


def schedules(sim: "Sim", h: SimpleNamespace) -> None:
    """Write the schedule part of the clean run (see the module docstring); its notable lines go to ``h``."""
    h.reschedule = sim.operator("reschedule", "timeout2", 6899, schedule="4", tz=None, **answer(1, 6900, "override"))
    h.b_stale_t8000 = versioned(sim.claim("B", "timeout2", 8000, 8000, "stale"), 0)
    sim.line("B", "event", 8002, type="skip", job="timeout2", slot_ms=8000, reason="rescheduled")
    h.c_won_t8000 = versioned(sim.won("C", "timeout2", 8000, 1, "c-t8000", 8000), 1, started=8000)
    ran(sim, "C", "timeout2", 8000, "c-t8000")
    h.reset = sim.operator("reset", "timeout2", 9499, **answer(2, 9500, "code"))

    h.put = sim.operator("put", "stored1", 3399, **PUT, **answer(1, 3400, "stored"))
    h.b_won_s5000 = versioned(sim.won("B", "stored1", 5000, 1, "b-s5000", 5000), 1, started=5000)
    versioned(sim.claim("C", "stored1", 5000, 5000, "running", attempt=1, token="b-s5000"), 1)
    ran(sim, "B", "stored1", 5000, "b-s5000")
    h.c_won_s6000 = versioned(sim.won("C", "stored1", 6000, 1, "c-s6000", 6000), 1, started=6000)
    versioned(sim.claim("B", "stored1", 6000, 6000, "running", attempt=1, token="c-s6000"), 1)
    ran(sim, "C", "stored1", 6000, "c-s6000", 300)
    h.delete = sim.operator("delete", "stored1", 7999, **answer(2, 8000, "code"))
    h.c_stale_s9000 = versioned(sim.claim("C", "stored1", 9000, 9000, "stale"), 1)
    sim.line("C", "event", 9002, type="skip", job="stored1", slot_ms=9000, reason="rescheduled")
