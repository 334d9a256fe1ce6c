"""Outcomes: each slot's end state, attempts only after dead runners, failures, ``max_attempts``."""

from __future__ import annotations

from typing import Optional, Tuple

from .bounds import Bounds, fmt_ms
from .model import Attempt, Model, Slot
from .report import INF, LATE_TOLERANCE_MS, NS, InvariantResult, JobConfig


def end_state(model: Model, slot: Slot, b: Bounds) -> Tuple[Optional[str], Optional[str]]:
    """(state, None) for an allowed end, or (None, why) for a violation."""
    rec = slot.record
    if rec is not None:
        status, error = rec.get("status"), str(rec.get("error") or "")
        if status in ("success", "failed"):
            return "completed", None
        if status == "interrupted" and error.startswith("superseded"):
            return "interrupted by a newer slot", None
        if status == "interrupted" and "max_attempts" in error:
            return "out of attempts", None
        if status == "running":
            why = _stuck(model, slot, b)
            return ("running at end", None) if why is None else (None, why)
        return None, f"record status {status!r} error {error!r}"
    # a manual claim answered ``none`` found no request to act on (another instance's claim had)
    outcomes = {c.get("outcome") for c in slot.claims if c.get("reason") != "takeover" and not _manual_none(c)}
    reached = outcomes - {None}
    if "won" in reached:
        return None, "a claim was won but the store holds no record"
    if reached == {"overlap"}:
        return "skipped as overlap", None
    if "late" in reached and reached <= {"late", "overlap"}:
        return "refused late", None
    if "paused" in reached and reached <= {"paused", "late", "overlap"}:
        return "skipped while paused", None
    if "stale" in reached and reached <= {"stale", "paused", "late", "overlap"}:
        return "skipped as rescheduled", None  # rule 23: claimed from a schedule a change replaced
    if not reached:
        return "unreached", None
    if _lost_unconfirmed(model, slot):
        return LOST_UNCONFIRMED, None
    return None, f"no record, and the claims were answered {sorted(str(o) for o in reached)}"


#: The end state of a slot whose only run was a claim's unconfirmed write that a failover discarded.
LOST_UNCONFIRMED = "unconfirmed, lost in a failover"


def _lost_unconfirmed(model: Model, slot: Slot) -> bool:
    """Whether the run that claims of ``slot`` were answered ``running`` or ``done`` about, and
    that the store no longer holds, may have lived only in writes that no replica confirmed,
    discarded by a failover.

    A replicated store answers what wrote nothing (``running``, a ``done`` about a run that had
    ended) from its primary, unconfirmed writes included: another claim's write whose ``WAIT``
    then fell short, or, on an old primary woken after a failover, what was written there before
    it became a replica. A failover loses those. So when no instance logged winning any attempt
    of the slot (nobody started that run), a claim of the slot got no answer or a process was
    killed (the run's claim, never acknowledged), and a failover was under way around those
    answers (from a settling time before it began to one after it ended), the slot has simply
    not run. An answered ``won`` keeps its violation."""
    if any(a.won is not None for atts in slot.attempts.values() for a in atts):
        return False
    seen = [
        c
        for c in slot.claims
        if c.get("outcome") in ("running", "done") and c.get("run_slot_ms") in (None, slot.slot_ms)
    ]
    if not seen:
        return False
    sent = min(c["t0_mono_ns"] for c in seen)
    answered = max(c["t1_mono_ns"] for c in seen)
    window = (model.config.max_late_ms + LATE_TOLERANCE_MS) * NS  # how long before a claim of the slot may be sent
    unacknowledged = any(c.get("outcome") is None for c in slot.claims) or model.nemesis_in(
        {"kill"}, sent - window, answered
    )
    settle = model.settle_ns()
    failovers = [n for n in model.nemesis if n.get("action") == "failover"]
    # the write is lost when the primary that holds it fails before a replica has it: the failover
    # begins around the answers (a kill just after them; a freeze before, the write done on waking)
    return bool(unacknowledged) and any(
        n["mono_ns"] <= answered + settle and n["mono_ns"] + int(n.get("duration_ms") or 0) * NS + settle >= sent
        for n in failovers
    )


def _unlogged_claim(model: Model, slot: Slot, runner: object) -> Optional[Tuple[int, int]]:
    """When the claim that wrote ``slot``'s record (an attempt no instance logged winning) may have
    been first sent, and when its instance last carried it; None if nothing shows when.

    Such a claim got no answer: the replicas did not confirm its write and its instance sent it
    again with its token (each try a line with no outcome: carried until the last answer), or
    the instance of the record's ``runner`` was killed or stopped before it logged the answer
    (carried until then). Either way the run began no earlier than the first claim of the slot
    logged."""
    claims = [c for c in slot.claims if isinstance(c.get("t0_mono_ns"), int)]
    if not claims:
        return None
    began = min(c["t0_mono_ns"] for c in claims)
    if any(c.get("outcome") is None for c in claims):
        return began, max(int(c.get("t1_mono_ns") or c["t0_mono_ns"]) for c in claims)
    gone = [t for t in (p.gone_ns() for p in model.procs.values() if p.runner == runner) if began <= t < INF]
    return (began, min(gone)) if gone else None


def _manual_none(claim: dict) -> bool:
    return claim.get("reason") == "manual" and claim.get("outcome") == "none"


def _ceased_ns(model: Model, att: Optional[Attempt]) -> Optional[int]:
    """When the attempt's runner stopped carrying it: killed, frozen for a lease, released, lost
    or ended. None: it was still at it when the logs end."""
    if att is None:
        kills = [n["mono_ns"] for n in model.nemesis if n.get("action") == "kill"]
        return max(kills) if kills else None
    start = att.start_ns or 0
    times = [c["recv_mono_ns"] for c in att.accepted("release")]
    times += [x["mono_ns"] for x in (att.lost, att.end) if x is not None]
    proc = model.proc(att.pid)
    if proc is not None:
        if proc.killed_ns is not None and proc.killed_ns >= start:
            times.append(proc.killed_ns)
        times += [s for s, e in proc.frozen if e >= start and e - s > model.config.lease_ms * NS]
    return min(times) if times else None


def _stuck(model: Model, slot: Slot, b: Bounds) -> Optional[str]:
    """Why a ``running`` record is a violation, or None when it was live at the end."""
    rec = slot.record or {}
    last = next((a for a in slot.attempts.get(int(rec.get("attempt", 0)), []) if a.token == rec.get("token")), None)
    # an attempt nobody logged winning: a claim's write its instance never saw answered
    unlogged = _unlogged_claim(model, slot, rec.get("runner")) if last is None else None
    ceased = unlogged[1] if unlogged else _ceased_ns(model, last)
    if ceased is None:
        return None
    interval = max(model.config.jobs.get(slot.job, JobConfig(0, "allow")).interval_ms, model.gaps.get(slot.job, 0))
    due = ceased + int((b.takeover_ms + interval) * NS)
    if due >= model.end_ns or not model.available(ceased, due, None if last is None else last.pid):
        return None  # the logs end first, or no instance could have taken it over
    starts = [a.start_ns or INF for atts in slot.attempts.values() for a in atts]
    began = unlogged[0] if unlogged else min(starts, default=INF)
    if any(min(began, ceased) <= t <= due for t in model.deletes.get(slot.job, [])):
        return None  # its stored job was deleted: the backups of its runs end (a run left running stays so)
    if model.faulted(ceased, due, any_scope=True, frozen_writers=True):
        return None  # a store or network fault, or a frozen SQLite writer, may have kept every claim from the store
    who = last.label() if last else f"attempt {rec.get('attempt')}"
    return (
        f"still running: {who} ceased {fmt_ms(model.end_ns - ceased)} before the end;"
        " instances ran throughout and none took it over"
    )


# ---------------------------------------------------------------------------------------------
# Attempts after dead runners, failures, max_attempts
# ---------------------------------------------------------------------------------------------


def _death_evidence(model: Model, att: Attempt, until: int) -> Optional[str]:
    """What shows that the attempt's runner died or was cut off before ``until``; None if nothing."""
    since = att.won_t0 or att.start_ns or 0
    proc = model.proc(att.pid)
    signals = model.nemesis_in({"kill", "term"}, since, until, att.pid)
    if signals:
        return signals[0]["action"]
    if proc is not None and proc.frozen_during(since, until):
        return "stop"
    if model.faulted(since, until, att.runner):
        return "store/network fault"
    for call in att.calls:
        if call["sent_mono_ns"] < until and (call.get("ok") is not True or call["ev"] == "release"):
            return (
                f"{call['ev']} {'released' if call.get('ok') else 'refused' if call.get('ok') is False else 'failed'}"
            )
    if att.lost is not None and att.lost["mono_ns"] < until:
        return "lost"
    if proc is not None and proc.gone_ns() < until:
        return "instance stopping"
    return None


def check_successors(model: Model, slot: Slot, dead: InvariantResult, failed: InvariantResult) -> None:
    ordered = slot.ordered()
    for att, nxt in zip(ordered, ordered[1:]):
        if nxt.won is None or att.won is None:
            dead.skipped += 1
            continue
        dead.checked += 1
        if _death_evidence(model, att, nxt.won["t1_mono_ns"]) is None:
            dead.fail(
                f"{slot.label()}: {nxt.label()} won although {att.label()}'s runner was alive,"
                " not cut off, and never refused"
            )
    for att in ordered:
        raised = [c for c in att.accepted("finish") if c.get("status") == "failed"]
        if not raised and not (att.end is not None and att.end.get("outcome") == "raised"):
            continue
        failed.checked += 1
        if raised:
            after = [a for a in ordered if a.attempt > att.attempt and (a.won_t0 or 0) > raised[0]["sent_mono_ns"]]
            if after:
                failed.fail(
                    f"{slot.label()}: {att.label()} raised and was recorded failed, yet {after[0].label()} was won"
                )


def check_max_attempts(slot: Slot, max_attempts: int, inv: InvariantResult) -> None:
    numbers = [n for n, atts in slot.attempts.items() if any(a.won is not None for a in atts)]
    if slot.record is not None:
        numbers.append(int(slot.record["attempt"]))
    if not numbers:
        return
    inv.checked += 1
    released = sum(1 for atts in slot.attempts.values() if any(a.accepted("release") for a in atts))
    by_death = max(numbers) - released
    if by_death > max_attempts:
        inv.fail(
            f"{slot.label()}: {max(numbers)} attempts, {released} released:"
            f" {by_death} started by dead runners > {max_attempts}"
        )
