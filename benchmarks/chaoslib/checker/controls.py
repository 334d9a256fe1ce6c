"""The cluster-wide controls: no new run of a paused job, and every trigger run once.

The operator's ``operator.jsonl`` (see :mod:`chaoslib.controls`) says what was asked of the
store and what it answered: each pause with its time on the store's clock, each resume with
the store's clock read before it, each request for a manual run with its slot and expiry,
and at the end the state of every job's requests (``final-state``). A call that raised may
have been carried out all the same; only what the answers prove is judged:

* a job is *surely paused* from a pause's answer until the next resume of it was sent
  (whatever that resume's fate): on the store's clock from the pause's ``paused_ms`` to the
  resume's ``now_before_ms`` (else ``paused_ms`` plus the monotonic time between the two, less
  :data:`~chaoslib.checker.report.CLOCK_SLACK_MS`);
* a trigger whose answer never came has no known slot: a manual run of its job that no logged
  request explains is excused (skipped) when such a trigger was sent before it was claimed;
* a request *must* run (or be skipped as an overlap, rule 17) when an instance was up, with no
  store or network fault of its own or of all, from its answer for ``poll_ms`` plus the
  hand-over bound: such an instance polls within ``poll_ms`` and claims at once. A request made
  while no instance could claim it may expire; it is counted as skipped.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional

from .bounds import Bounds
from .model import Model
from .report import CLOCK_SLACK_MS, INF, NS, InvariantResult, Line

#: The reasons of a claim that starts a new scheduled run (the ones a pause refuses).
SCHEDULED = ("schedule", "catch-up")
#: The operator's actions that change a schedule (rule 24).
SCHEDULE_CHANGES = ("reschedule", "reset", "put", "delete")


@dataclasses.dataclass
class PauseWindow:
    """A stretch in which the operator's answers prove ``job`` paused."""

    job: str
    paused_ms: int
    sent_ns: int  # the pause was sent
    since_ns: int  # its answer came back: paused from here on
    until_ns: int  # the next resume was sent (INF: never)
    until_ms: Optional[int]  # the store's clock when it was sent, at least (None: no resume)


@dataclasses.dataclass
class Controls:
    """The operator's log, indexed."""

    windows: List[PauseWindow] = dataclasses.field(default_factory=list)
    requests: Dict[tuple, Line] = dataclasses.field(default_factory=dict)  # (job, slot_ms) -> trigger line
    failed_triggers: List[Line] = dataclasses.field(default_factory=list)
    final: Dict[tuple, str] = dataclasses.field(default_factory=dict)  # (job, slot_ms) -> final request state
    #: The schedule changes (reschedule, reset, put, delete), answered or not (``checker/schedules.py``).
    changes: List[Line] = dataclasses.field(default_factory=list)
    #: When the operator stopped (its ``stopped`` line), before the harness stopped the instances.
    stopped_ns: int = INF
    actions: int = 0


def read_controls(log_dir: Path) -> Controls:
    """The operator's lines of ``log_dir/operator.jsonl`` (none: an empty :class:`Controls`)."""
    lines: List[Line] = []
    path = Path(log_dir) / "operator.jsonl"
    if path.exists():
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("ev") == "operator" and isinstance(line.get("t0_mono_ns"), int):
                lines.append(line)
    return index_controls(sorted(lines, key=lambda ln: ln["t0_mono_ns"]))


def index_controls(lines: List[Line]) -> Controls:
    """:class:`Controls` of the operator's lines, in the order they were sent."""
    out = Controls()
    open_pause: Dict[str, Line] = {}
    for line in lines:
        action, job, ok = line.get("action"), str(line.get("job")), "error" not in line
        out.actions += action not in ("final-state", "final-schedule", "stopped")
        if action == "pause":
            open_pause.pop(job, None)
            if ok and isinstance(line.get("paused_ms"), int):
                open_pause[job] = line
        elif action == "resume":
            pause = open_pause.pop(job, None)
            if pause is not None:
                out.windows.append(_window(pause, line))
        elif action == "trigger":
            if ok and isinstance(line.get("slot_ms"), int):
                out.requests[(job, line["slot_ms"])] = line
            else:
                out.failed_triggers.append(line)
        elif action in SCHEDULE_CHANGES:
            out.changes.append(line)
        elif action == "stopped":
            out.stopped_ns = min(out.stopped_ns, line["t0_mono_ns"])
        elif action == "final-state":
            for req in (line.get("state") or {}).get("requests") or []:
                out.final[(str(req.get("job")), req.get("slot_ms"))] = str(req.get("state"))
    for job, pause in open_pause.items():
        out.windows.append(PauseWindow(job, pause["paused_ms"], pause["t0_mono_ns"], pause["t1_mono_ns"], INF, None))
    return out


def _window(pause: Line, resume: Line) -> PauseWindow:
    since, until = pause["t1_mono_ns"], resume["t0_mono_ns"]
    before = resume.get("now_before_ms")
    if not isinstance(before, int):
        before = pause["paused_ms"] + (until - since) // NS - CLOCK_SLACK_MS
    return PauseWindow(str(pause["job"]), pause["paused_ms"], pause["t0_mono_ns"], since, until, before)


def _first_attempt(record: dict) -> Optional[dict]:
    """The record's attempt 1 (None when it is no longer kept)."""
    attempts = record.get("attempts") or []
    return attempts[0] if attempts and attempts[0].get("number") == 1 else None


def check_paused(model: Model, controls: Controls, inv: InvariantResult) -> None:
    """No ``schedule``/``catch-up`` run of a job won while it was surely paused: by the instances'
    claim lines (monotonic clock) and by the stored attempt 1 (the store's clock)."""
    for w in controls.windows:
        inv.checked += 1
        for claim in model.claims:
            if (
                claim.get("job") == w.job and claim.get("outcome") == "won" and claim.get("attempt") == 1
                and claim.get("reason") in SCHEDULED and claim["t0_mono_ns"] > w.since_ns
                and claim["t1_mono_ns"] < w.until_ns
            ):  # fmt: skip
                if _retry_of_earlier_try(model, claim, w.since_ns):
                    inv.skipped += 1  # the store may have carried out the first try before the pause
                    continue
                inv.fail(
                    f"{w.job}@{claim.get('slot_ms')}: {claim.get('runner')} won a {claim.get('reason')} claim"
                    f" sent {(claim['t0_mono_ns'] - w.since_ns) / NS:.0f} ms after the pause of {w.paused_ms}"
                    " was stored, before its resume"
                )
        until_ms = w.until_ms if w.until_ms is not None else INF
        for slot in model.slots.values():
            first = _first_attempt(slot.record) if slot.job == w.job and slot.record else None
            if first is None or first.get("reason") not in SCHEDULED:
                continue
            if not w.paused_ms < int(first.get("started_ms") or 0) < until_ms:
                continue
            if any(c.get("outcome") == "won" and c.get("attempt") == 1 for c in slot.claims):
                continue  # its claim line was judged above, on the monotonic clock
            if model.clock_stepped(0, w.until_ns):
                # the store's clock jumped before the resume: its times do not order the calls (a
                # claim won before the pause, while the clock was ahead, reads as after it)
                inv.skipped += 1
                continue
            inv.fail(
                f"{slot.label()}: attempt 1 ({first.get('runner')}, {first.get('reason')}) started at"
                f" {first.get('started_ms')} on the store's clock, after the pause stored at {w.paused_ms}"
                + ("" if w.until_ms is None else f" and before its resume (after {w.until_ms})")
            )


def _retry_of_earlier_try(model: Model, claim: Line, before: int) -> bool:
    """Whether ``claim`` may be the retry of a try of the same claim (same runner and slot) sent
    before ``before`` that got no answer: a retry of the claim that won is answered ``won`` again
    (the lease renewed, no new run) if the store carried the first try out."""
    slot = model.slots.get((claim.get("job"), claim.get("slot_ms")))
    return slot is not None and any(
        c.get("runner") == claim.get("runner") and c.get("outcome") is None and c["t0_mono_ns"] < before
        for c in slot.claims
    )


#: The reasons of a claim that may start the run of a request: the manual claim, or (rule 12) the
#: scheduled or catch-up claim of a slot of the schedule that the request's slot falls on.
_STARTS_A_REQUESTED_RUN = {"manual", "schedule", "catch-up"}


def check_triggers(model: Model, controls: Controls, b: Bounds, inv: InvariantResult) -> None:
    """Each request ran at most once, and once (or was skipped as an overlap) when an instance
    was up to claim it; no manual run that no request explains."""
    for (job, slot_ms), req in sorted(controls.requests.items()):
        inv.checked += 1
        slot = model.slots.get((job, slot_ms))
        label = f"{job}@{slot_ms} (requested at {req['t1_mono_ns'] / NS:.0f} ms)"
        claims = slot.claims if slot is not None else []
        wins = {c.get("token") for c in claims if c.get("outcome") == "won" and c.get("attempt") == 1}
        if len(wins) > 1:
            inv.fail(f"{label}: the request's run was won {len(wins)} times")
        # A request's slot is the store's time of the request; when it falls on a slot of the
        # schedule (a 1-s job, a request at a whole second), the scheduled or catch-up claim of
        # that slot may come first: it runs the one run the request asked for (rule 12).
        interval = model.config.jobs[job].interval_ms if job in model.config.jobs else None
        starters = _STARTS_A_REQUESTED_RUN if interval and slot_ms % interval == 0 else {"manual"}
        odd = sorted({str(c.get("reason")) for c in claims if c.get("outcome") == "won" and c.get("attempt") == 1}
                     - starters)  # fmt: skip
        record = slot.record if slot is not None else None
        first = _first_attempt(record) if record is not None else None
        if first is not None and first.get("reason") not in starters:
            odd.append(f"stored {first.get('reason')}")
        if odd:
            inv.fail(f"{label}: the request's slot was won by a non-manual claim ({', '.join(odd)})")
        final = controls.final.get((job, slot_ms))
        skipped = final == "skipped" or any(
            c.get("reason") == "manual" and c.get("outcome") == "overlap" for c in claims
        )
        if record is not None:
            by_schedule = first is not None and first.get("reason") in ("schedule", "catch-up")
            if final == "skipped" and by_schedule and not any(c.get("reason") == "manual" and c.get("outcome") == "won"
                                                              for c in claims):  # fmt: skip
                # overlap="skip": the manual claim found the job's previous run alive and skipped the
                # request (rule 17); the slot's own scheduled claim came later, after that run ended,
                # and ran the slot as the schedule's run (rules 10 and 12 judged at its own time)
                continue
            if final not in (None, "claimed"):
                inv.fail(f"{label}: the request ran, yet the store shows it {final}")
            continue
        if final == "claimed":
            inv.fail(f"{label}: the store shows the request claimed, but holds no run at its slot")
        elif skipped:
            continue
        elif _claimable(model, req["t1_mono_ns"], req["t1_mono_ns"] + int((model.config.poll_ms + b.handover_ms) * NS)):
            inv.fail(f"{label}: never ran (the store shows it {final or 'not at all'}) though an instance was up")
        else:
            inv.skipped += 1  # no instance could surely claim it in time: it may expire
    _unrequested(model, controls, inv)


def _unrequested(model: Model, controls: Controls, inv: InvariantResult) -> None:
    """A won manual run must have a logged request, or a trigger of its job that got no answer."""
    for claim in model.claims:
        if claim.get("reason") != "manual" or claim.get("outcome") != "won" or claim.get("attempt") != 1:
            continue
        if (claim.get("job"), claim.get("slot_ms")) in controls.requests:
            continue
        inv.checked += 1
        if any(
            t.get("job") == claim.get("job") and t["t0_mono_ns"] < claim["t1_mono_ns"] for t in controls.failed_triggers
        ):
            inv.skipped += 1  # a trigger that raised may have made this request
            continue
        inv.fail(f"{claim.get('job')}@{claim.get('slot_ms')}: {claim.get('runner')} won a manual run nobody requested")


def _claimable(model: Model, a: int, b: int) -> bool:
    """Whether an instance was up throughout ``[a, b]`` and could reach the store: started, not
    frozen nor stopping, still logging, with no store or network fault of its own or of all (on
    SQLite, no frozen writer holding the lock), and the store's clock not stepped."""
    if model.clock_stepped(a, b):
        return False
    for proc in model.procs.values():
        if proc.running_ns is None or proc.running_ns > a or proc.gone_ns() <= b or proc.last_ns < b:
            continue
        if proc.frozen_during(a, b) or model.faulted(a, b, proc.runner, frozen_writers=True):
            continue
        return True
    return False
