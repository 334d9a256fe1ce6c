"""Schedules as data: no run of a replaced schedule starts after the change, and each stored job's
slots run once (the operator's changes: :mod:`chaoslib.schedules`).

What the recording gives, and so what is judged:

* each change the operator logged with the store's answer: the job, the new ``version``, its
  ``source`` and schedule, and ``updated_ms``, the change's time on the store's clock, read
  inside the same atomic step (under the job's lock on PostgreSQL, in the script on Redis, in
  ``BEGIN IMMEDIATE`` on SQLite) as every claim of the job reads its own ``now``. A change that
  raised may or may not have been stored: it proves nothing and is never judged against;
* each claim line: the ``version`` its slot was computed from, its outcome, and for a won claim
  the run's ``run_started_ms``, its attempt's start on the same store clock.

``rescheduled_fenced`` (rule 23): a claim from version ``v`` that won a new run (attempt 1, a
scheduled or catch-up claim) must have started no later than every answered change of its job to
a version above ``v``: ``run_started_ms > updated_ms`` is a violation. The two times come from
one clock inside one serialised step each, so nothing else is allowed for; equal milliseconds
cannot be ordered and pass. A step of the store's clock (Valkey under libfaketime) between the
change and the claim makes its times unorderable: skipped. A stored attempt 1 whose claim line
was never logged (SIGKILL between the answer and the line) has no known version: skipped when
it started after a change of its job. A run already running is not judged (rule 23 fences new
runs only), nor manual runs (never fenced), nor takeovers.

``stored_once`` (each stored job's slots run exactly once). At most once is what the other
invariants prove of every slot, the stored jobs' included. Here:

* every won new run (attempt 1, not manual) of a stored job was claimed from an answered put
  whose schedule has that slot; a claim from a delete's version (or version 0) is a deleted
  job's slot run, one from a version no answered change shows is skipped;
* a slot *due while the job existed and an instance was up* has a run: for the put's version,
  a slot at least ``poll_ms + rtt + margin`` after the put's answer (an instance that saw it
  has polled by then, and plans the new schedule from its next slot) and at least the
  hand-over bound before the job's next change was sent (its claim is answered first); due when
  some instance ran from before the put's answer to past that bound after the slot, never
  frozen, with no store or network fault of its own or of all while it polled the change and
  around the slot, and the store's clock not stepped (``chaoslib.checker.controls._claimable``
  with the stretch split in two), and before the operator's ``stopped`` line (the harness stops
  the instances after it, with SIGTERMs no line shows). Any stored record of the slot counts as
  its run; a slot that lost an unconfirmed run in a failover is skipped. Other slots are not
  judged (counted skipped).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from leasecron.schedules import IntervalSchedule, Schedule, make_schedule
from leasecron.stored import schedule_spec

from .bounds import Bounds
from .controls import SCHEDULED, Controls
from .model import Model, Proc
from .outcomes import LOST_UNCONFIRMED, end_state
from .report import INF, NS, InvariantResult, Line
from .timing import RESYNC_NS

__all__ = ["Change", "changes_of", "check_fenced", "check_stored_once", "effects", "longest_gaps"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One schedule change the operator logged: what it asked, and the store's answer (``version``
    None when the call raised)."""

    job: str
    action: str
    sent_ns: int
    answered_ns: int
    #: The host's wall clock minus the monotonic clock when the answer came (ns).
    wall_offset_ns: int
    version: Optional[int]
    source: Optional[str]
    schedule: Optional[str]
    tz: Optional[str]
    updated_ms: Optional[int]

    @property
    def answered(self) -> bool:
        """Whether the store's answer is known."""
        return self.version is not None and self.updated_ms is not None

    def mono_ns(self, wall_ms: int) -> int:
        """A time of the store's (the host's) wall clock on the monotonic clock."""
        return wall_ms * NS - self.wall_offset_ns

    def wall_ms(self, mono_ns: int) -> int:
        """A monotonic time on the host's wall clock (ms)."""
        return (mono_ns + self.wall_offset_ns) // NS

    def label(self) -> str:
        """``put v3 (* * * * * */2 Europe/Berlin) stored at 1234`` for messages."""
        what = "" if self.schedule is None else f" ({self.schedule}{'' if self.tz is None else ' ' + self.tz})"
        return f"{self.action} v{self.version}{what} stored at {self.updated_ms}"


def changes_of(controls: Controls) -> Dict[str, List[Change]]:
    """The schedule changes of each job, in the order they were sent."""
    out: Dict[str, List[Change]] = {}
    for line in controls.changes:
        ok = "error" not in line and isinstance(line.get("version"), int) and isinstance(line.get("updated_ms"), int)
        change = Change(
            str(line.get("job")), str(line.get("action")), line["t0_mono_ns"], line["t1_mono_ns"],
            int(line.get("wall_ns", line["t1_mono_ns"])) - int(line.get("mono_ns", line["t1_mono_ns"])),
            line["version"] if ok else None, line.get("source") if ok else None, line.get("schedule"),
            line.get("tz"), line["updated_ms"] if ok else None,
        )  # fmt: skip
        out.setdefault(change.job, []).append(change)
    return out


def _schedule(model: Model, job: str, change: Optional[Change]) -> Optional[Schedule]:
    """The schedule a job had under ``change`` (None: the code's), or None when it had none (a
    stored job deleted, a name with no code job)."""
    if change is None or change.schedule is None or change.source == "code":
        jc = model.config.jobs.get(job)
        return None if jc is None else IntervalSchedule(jc.interval_ms)
    return make_schedule(schedule_spec(change.schedule), change.tz or "UTC")


def longest_gaps(model: Model, changes: Dict[str, List[Change]]) -> Dict[str, int]:
    """The longest time between two slots of any schedule each changed job had (ms)."""
    out: Dict[str, int] = {}
    for job, chs in changes.items():
        gaps = [0]
        for ch in [None, *chs]:
            sched = _schedule(model, job, ch)
            if sched is not None:
                at = sched.next_after(0 if ch is None or ch.updated_ms is None else ch.updated_ms)
                for _ in range(60):
                    nxt = sched.next_after(at)
                    gaps.append(nxt - at)
                    at = nxt
        out[job] = max(gaps)
    return out


def _new_runs(model: Model, job: Optional[str] = None) -> List[Line]:
    """The claim lines that won a new run (attempt 1) of a scheduled or catch-up claim."""
    return [
        c
        for c in model.claims
        if c.get("outcome") == "won" and c.get("attempt") == 1 and c.get("reason") in SCHEDULED
        and (job is None or c.get("job") == job)
    ]  # fmt: skip


def check_fenced(model: Model, changes: Dict[str, List[Change]], inv: InvariantResult) -> None:
    """``rescheduled_fenced``: see the module docstring."""
    logged = set()
    for claim in _new_runs(model):
        job, version, started = claim.get("job"), claim.get("version"), claim.get("run_started_ms")
        answered = [c for c in changes.get(str(job), []) if c.answered]
        if not answered or not isinstance(version, int) or not isinstance(started, int):
            continue
        logged.add((job, claim.get("slot_ms")))
        newer = [c for c in answered if c.version is not None and c.version > version]
        # a claim answered before the change was sent started its run before it, whatever the clocks say
        late = [
            c for c in newer
            if c.updated_ms is not None and started > c.updated_ms and claim["t1_mono_ns"] >= c.sent_ns
        ]  # fmt: skip
        if late and any(model.clock_stepped(*sorted((c.sent_ns, claim["t1_mono_ns"]))) for c in late):
            inv.skipped += 1  # the store's clock jumped between them: its times do not order them
            continue
        inv.checked += 1
        if late:
            ch = min(late, key=lambda c: c.updated_ms or 0)
            inv.fail(
                f"{job}@{claim.get('slot_ms')}: {claim.get('runner')} started a new run at {started} on the store's"
                f" clock from version {version}, after the {ch.label()} ({started - (ch.updated_ms or 0)} ms before)"
            )
    for (job, slot_ms), slot in model.slots.items():
        first = _first_attempt(slot.record)
        answered = [c for c in changes.get(job, []) if c.answered]
        if first is None or (job, slot_ms) in logged or first.get("reason") not in SCHEDULED or not answered:
            continue
        if any(int(first.get("started_ms") or 0) > (c.updated_ms or 0) for c in answered):
            inv.skipped += 1  # no claim line: the version it was claimed from is not known


def _first_attempt(record: Optional[dict]) -> Optional[dict]:
    attempts = (record or {}).get("attempts") or []
    return attempts[0] if attempts and attempts[0].get("number") == 1 else None


def check_stored_once(
    model: Model, changes: Dict[str, List[Change]], b: Bounds, inv: InvariantResult, end_ns: int = INF
) -> int:
    """``stored_once``: see the module docstring; no slot is due after ``end_ns`` (the operator's
    ``stopped`` line: the harness stops the instances after it, a SIGTERM no line shows). Returns
    how many slots were judged due."""
    end_ns = min(end_ns, model.end_ns)
    due = 0
    stored = sorted(job for job, chs in changes.items() if any(c.action == "put" for c in chs))
    for job in stored:
        chs = changes[job]
        _check_claimed_versions(model, job, chs, inv)
        for i, ch in enumerate(chs):
            if ch.answered and ch.source == "stored":
                until = chs[i + 1].sent_ns if i + 1 < len(chs) else end_ns
                due += _check_due_slots(model, job, ch, min(until, end_ns), b, inv)
    return due


def _check_claimed_versions(model: Model, job: str, chs: List[Change], inv: InvariantResult) -> None:
    """Every new run of the stored job ``job`` was claimed from a put whose schedule has its slot."""
    by_version = {c.version: c for c in chs if c.answered}
    for claim in [c for c in model.claims if c.get("job") == job and c.get("outcome") == "won"]:
        if claim.get("attempt") != 1 or claim.get("reason") == "manual":
            continue
        version, slot_ms = claim.get("version"), int(claim.get("slot_ms") or 0)
        ch = by_version.get(version)
        if version != 0 and ch is None:
            inv.skipped += 1  # a change that raised, or an older log: its schedule is not known
            continue
        inv.checked += 1
        label = f"{job}@{slot_ms}: {claim.get('runner')} won a new run from version {version}"
        if ch is None or ch.source != "stored":
            inv.fail(f"{label}, which holds no stored job ({'never put' if ch is None else ch.label()})")
            continue
        sched = _schedule(model, job, ch)
        if sched is None or sched.next_after(slot_ms - 1) != slot_ms:
            inv.fail(f"{label}: not a slot of its schedule ({ch.label()})")


def _check_due_slots(model: Model, job: str, ch: Change, until: int, b: Bounds, inv: InvariantResult) -> int:
    """Each slot of the put ``ch`` due while the job existed and an instance was up has a run; how
    many were due."""
    sched = _schedule(model, job, ch)
    due = 0
    if sched is None:
        return due
    applied = ch.answered_ns + int((model.config.poll_ms + b.rtt_p99_ms + b.margin_ms) * NS)
    bound = int(b.handover_ms * NS)
    slot_ms = sched.next_after(ch.wall_ms(applied))
    while ch.mono_ns(slot_ms) + bound <= until:
        at = ch.mono_ns(slot_ms)
        who = _up_throughout(model, ch.answered_ns, applied, at - bound, at + bound)
        slot = model.slots.get((job, slot_ms))
        due += who is not None
        if who is None:
            inv.skipped += 1
        elif slot is not None and slot.record is not None:
            inv.checked += 1
        elif slot is not None and end_state(model, slot, b)[0] == LOST_UNCONFIRMED:
            inv.skipped += 1
        else:
            inv.checked += 1
            answers = sorted({str(c.get("outcome")) for c in slot.claims}) if slot is not None else []
            inv.fail(
                f"{job}@{slot_ms} ({ch.label()}): never ran, though {who.runner} (pid {who.pid}) ran from"
                f" before the change throughout; its claims were answered {answers or 'nothing (none sent)'}"
            )
        slot_ms = sched.next_after(slot_ms)
    return due


def _up_throughout(model: Model, changed: int, applied: int, a: int, b: int) -> Optional[Proc]:
    """An instance that ran from ``changed`` to ``b`` (started, never frozen, stopping or killed,
    still logging), could reach the store while it polled the change (``changed`` to ``applied``)
    and around the slot (``a`` to ``b``), with the store's clock never stepped meanwhile."""
    if model.clock_stepped(changed, b, RESYNC_NS):
        return None
    for proc in sorted(model.procs.values(), key=lambda p: p.pid):
        if proc.running_ns is None or proc.running_ns > changed or proc.gone_ns() <= b or proc.last_ns < b:
            continue
        if proc.frozen_during(changed, b):
            continue
        if any(model.faulted(x, y, proc.runner, frozen_writers=True) for x, y in ((changed, applied), (a, b))):
            continue
        return proc
    return None


def effects(model: Model, changes: Dict[str, List[Change]]) -> Dict[str, int]:
    """The report's effects of the schedule changes: those answered, the stored jobs' new runs, the
    claims answered ``stale`` and the ``skip`` events (reason ``rescheduled``) they caused."""
    answered = [c for chs in changes.values() for c in chs if c.answered]
    return {
        "schedule_changes": len(answered),
        "stored_job_runs": sum(
            1 for c in _new_runs(model) if any(ch.action == "put" for ch in changes.get(str(c.get("job")), []))
        ),
        "stale_claims": sum(1 for c in model.claims if c.get("outcome") == "stale"),
        "rescheduled_skips": sum(1 for e in model.skip_events if e.get("reason") == "rescheduled"),
    }
