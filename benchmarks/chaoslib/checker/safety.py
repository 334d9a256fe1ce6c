"""Safety: tokens, attempt numbers, records, finishes, fencing, overlaps, ``lost`` and local deadlines."""

from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Tuple

from .bounds import Bounds, fmt_ms
from .model import Attempt, Model, Slot
from .report import INF, NS, InvariantResult


def check_tokens(model: Model, inv: InvariantResult) -> None:
    owners: Dict[str, List[Attempt]] = {}
    for att in model.attempts.values():
        if att.won is not None:
            owners.setdefault(att.token, []).append(att)
    for token, atts in owners.items():
        inv.checked += 1
        if len(atts) > 1:
            inv.fail(f"token {token} won by {len(atts)} attempts: " + ", ".join(a.label() for a in atts))


def check_attempts(model: Model, slot: Slot, inv: InvariantResult) -> None:
    won = sorted((a for atts in slot.attempts.values() for a in atts if a.won is not None), key=lambda a: a.won_t1 or 0)
    record_attempt = int(slot.record["attempt"]) if slot.record else 0
    if not won and not record_attempt:
        return
    inv.checked += 1
    numbers = [a.attempt for a in won]
    for n in sorted(set(numbers)):
        if numbers.count(n) > 1:
            inv.fail(
                f"{slot.label()}: attempt {n} won {numbers.count(n)} times: "
                + ", ".join(a.label() for a in won if a.attempt == n)
            )
    for low in won:
        for high in won:
            if high.attempt > low.attempt and (high.won_t1 or 0) < (low.won_t0 or 0):
                inv.fail(
                    f"{slot.label()}: attempt {high.attempt} ({high.runner}) was won"
                    f" before attempt {low.attempt} ({low.runner}) was claimed"
                )
    top = max(numbers + [record_attempt])
    for n in range(1, top + 1):
        if n in numbers:
            continue
        if _unlogged_win_possible(model, slot, won, n):
            inv.skipped += 1
        else:
            inv.fail(
                f"{slot.label()}: attempt {n} missing (attempts {sorted(set(numbers))}, record {record_attempt})"
                " and no SIGKILL could explain it"
            )


def _unlogged_win_possible(model: Model, slot: Slot, won: List[Attempt], n: int) -> bool:
    """Whether attempt ``n`` could have been won without a ``won`` line: a SIGKILL between the
    store's answer and the log line, or a claim of the slot that got no answer (it timed out,
    its connection broke) though the store may have carried it out (an ambiguous write). Such
    a claim may be carried out any time after it was sent, even after a claim sent later (a
    server that waited for its synchronous standby ran it seconds after its client gave up), so
    only a higher attempt's claim bounds it."""
    since = max((a.won_t1 or 0 for a in won if a.attempt < n), default=0)
    until = min((a.won_t0 or INF for a in won if a.attempt > n), default=INF)
    unanswered = [c for c in slot.claims if c.get("outcome") is None and c["t0_mono_ns"] <= until]
    return bool(unanswered or model.nemesis_in({"kill"}, since, until))


def check_record(model: Model, slot: Slot, inv: InvariantResult) -> None:
    won = [a for atts in slot.attempts.values() for a in atts if a.won is not None]
    if not won:
        return
    inv.checked += 1
    last = max(won, key=lambda a: a.attempt)
    rec = slot.record
    if rec is None:
        inv.fail(f"{slot.label()}: attempts were won (last {last.label()}) but the store holds no record")
    elif int(rec["attempt"]) > last.attempt and _unlogged_win_possible(model, slot, won, int(rec["attempt"])):
        inv.skipped += 1
    elif int(rec["attempt"]) != last.attempt or rec.get("token") != last.token:
        inv.fail(
            f"{slot.label()}: record holds attempt {rec['attempt']} token {rec.get('token')} ({rec.get('runner')}),"
            f" the last attempt won is {last.label()} token {last.token}"
        )


def check_one_finish(slot: Slot, inv: InvariantResult) -> None:
    finishes = [c for atts in slot.attempts.values() for a in atts for c in a.accepted("finish")]
    if not finishes and not (slot.record and slot.record.get("status") in ("success", "failed")):
        return
    inv.checked += 1
    if len(finishes) > 1:
        who = ", ".join(f"#{c.get('attempt')} {c.get('runner')} {c.get('status')}" for c in finishes)
        inv.fail(f"{slot.label()}: {len(finishes)} finishes accepted: {who}")
    rec = slot.record
    for c in finishes:
        if rec is None or c["token"] != rec.get("token") or c.get("status") != rec.get("status"):
            held = (
                "no record"
                if rec is None
                else f"record #{rec.get('attempt')} {rec.get('status')} token {rec.get('token')}"
            )
            inv.fail(
                f"{slot.label()}: finish of #{c.get('attempt')} ({c.get('runner')}) {c.get('status')}"
                f" accepted, but {held}"
            )


def check_fencing(slot: Slot, inv: InvariantResult) -> None:
    ordered = slot.ordered()
    for att in ordered:
        newer = [a.won_t1 for a in ordered if a.attempt > att.attempt and a.won_t1 is not None]
        superseded = min(newer, default=INF)
        released = min((c["recv_mono_ns"] for c in att.accepted("release")), default=INF)
        for call in att.calls:
            sent = call["sent_mono_ns"]
            after_release = call["ev"] == "heartbeat" and sent > released
            if sent <= superseded and not after_release:
                continue
            inv.checked += 1
            if call.get("ok") is True:
                why = "after a newer attempt was won" if sent > superseded else "after its own release"
                inv.fail(f"{att.label()}: {call['ev']} with token {att.token} accepted, sent {why}")


# ---------------------------------------------------------------------------------------------
# Overlap, lost, local deadline
# ---------------------------------------------------------------------------------------------


def _covered_ns(ticks: List[int], start: int, end: int, tick_ns: int) -> int:
    """The time in ``[start, end)`` covered by ``[t, t + tick)`` of the ticks."""
    total, reach = 0, start
    for t in ticks[bisect.bisect_left(ticks, start - tick_ns) :]:
        if t >= end:
            break
        a, b = max(t, reach), min(t + tick_ns, end)
        if b > a:
            total += b - a
            reach = b
    return total


def _activity_after(att: Attempt, t: int) -> Optional[int]:
    """The first thing the attempt did after ``t``: a tick, a store call sent, a handler line."""
    times = [x for x in att.ticks if x > t][:1]
    times += [c["sent_mono_ns"] for c in att.calls if c["sent_mono_ns"] > t]
    times += [h["mono_ns"] for h in att.handler if h["mono_ns"] > t]
    return min(times) if times else None


def check_overlap(model: Model, slot: Slot, b: Bounds, overlap: InvariantResult, lost: InvariantResult) -> None:
    ordered = [a for a in slot.ordered() if a.start_ns is not None]
    bound_ns = b.overlap_ms * NS
    tick_ns = model.config.tick_ms * NS
    for i, older in enumerate(ordered):
        proc = model.proc(older.pid)
        resumes = proc.resume_marks(int(b.margin_ms * NS)) if proc else []
        for newer in ordered[i + 1 :]:
            first_tick = newer.ticks[0] if newer.ticks else newer.start_ns
            assert first_tick is not None and newer.start_ns is not None
            overlap.checked += 1
            cuts = [first_tick] + [c for c in resumes if c > first_tick] + [INF]
            for seg_start, seg_end in zip(cuts, cuts[1:]):
                covered = _covered_ns(older.ticks, seg_start, seg_end, tick_ns)
                if covered > bound_ns and model.faulted(seg_start, seg_start + covered, older.runner):
                    overlap.skipped += 1  # a network or store fault slowed the older's refused heartbeat
                    break
                if covered > bound_ns:
                    overlap.fail(
                        f"{slot.label()}: {older.label()} ticked {fmt_ms(covered)} after {newer.label()} began"
                        f" (bound {b.overlap_ms:.0f} ms)"
                    )
                    break
            _check_lost(model, older, newer, resumes, bound_ns, lost)


def _check_lost(
    model: Model, older: Attempt, newer: Attempt, resumes: List[int], bound_ns: float, inv: InvariantResult
) -> None:
    inv.checked += 1
    newer_start = newer.start_ns
    assert newer_start is not None
    first = _activity_after(older, newer_start)
    if first is None or (older.lost is not None and older.lost["mono_ns"] <= newer_start):
        return
    origin = max([newer_start] + [c for c in resumes if c <= first][-1:])
    if older.lost is not None and older.lost["mono_ns"] - origin <= bound_ns:
        return
    proc = model.proc(older.pid)
    cut_short = min(model.end_ns, INF if proc is None else min(proc.killed_ns or INF, proc.next_freeze(origin)))
    if cut_short < origin + bound_ns:  # killed, frozen again, or the logs end before lost was due
        inv.skipped += 1
    elif model.faulted(origin, int(origin + bound_ns), older.runner):  # its refused heartbeat was held up
        inv.skipped += 1
    elif older.lost is None:
        inv.fail(
            f"{older.label()} ran on after {newer.label()} began ({fmt_ms(first - newer_start)} later)"
            " and never logged lost"
        )
    elif older.lost["mono_ns"] - origin > bound_ns:
        inv.fail(
            f"{older.label()} logged lost {fmt_ms(older.lost['mono_ns'] - origin)} after the newer start / SIGCONT"
            f" (bound {fmt_ms(bound_ns)})"
        )


def check_local_deadline(model: Model, att: Attempt, b: Bounds, inv: InvariantResult) -> None:
    renewals = att.renewals()
    if not renewals or att.won_t1 is None or (not att.ticks and att.lost is None):
        return
    inv.checked += 1
    deadline = _LocalDeadline(renewals, att.won_t1, int(b.lease_ms * NS))
    proc = model.proc(att.pid)
    margin_ns = b.margin_ms * NS

    def late_by(t: int) -> int:
        """How far past its local deadline the attempt was at ``t`` (0 if not, or if it was paused)."""
        renewed, due = deadline.at(t)
        if renewed is None or t <= due + margin_ns or (proc is not None and proc.frozen_during(renewed, t)):
            return 0
        return t - due

    for t in att.ticks:
        if late_by(t):
            inv.fail(f"{att.label()} ticked {fmt_ms(late_by(t))} past its local deadline without a pause")
            return
    lost = att.lost
    if lost is None or att.refused_before(lost["mono_ns"]) or not late_by(lost["mono_ns"]):
        return
    end = att.end
    if end is not None and end["mono_ns"] < lost["mono_ns"] and not late_by(end["mono_ns"]):
        return  # the handler had ended in time: nothing was left to abort, only the store's record of the end
    inv.fail(f"{att.label()} logged lost {fmt_ms(late_by(lost['mono_ns']))} past its local deadline without a pause")


class _LocalDeadline:
    """An attempt's local deadline as its runner knew it at each moment.

    It is the latest send time of a renewal answered by then, plus the lease;
    but never before the winning claim was answered (a claim stuck in a
    stalled store is won late, and the runner only then learns it holds a
    lease that may already have run out).
    """

    def __init__(self, renewals: List[Tuple[int, int]], won_at: int, lease_ns: int) -> None:
        by_answer = sorted(renewals, key=lambda r: r[1])
        self._answers = [r for _, r in by_answer]
        self._latest = _running_max([s for s, _ in by_answer])
        self._won_at = won_at
        self._lease_ns = lease_ns

    def at(self, t: int) -> Tuple[Optional[int], int]:
        """(the latest renewal's send time, the deadline) at ``t``; (None, INF) before the win."""
        i = bisect.bisect_right(self._answers, t)
        if i == 0:
            return None, INF
        renewed = self._latest[i - 1]
        return renewed, max(renewed + self._lease_ns, self._won_at)


def _running_max(values: List[int]) -> List[int]:
    out, best = [], -INF
    for v in values:
        best = max(best, v)
        out.append(best)
    return out
