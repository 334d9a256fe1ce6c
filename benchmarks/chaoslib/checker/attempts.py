"""The stored attempts of each run (``Run.attempts``) against the instances' logs.

A run's record holds its attempts, oldest first (the newest 20): ``number``, ``runner``,
``reason``, ``started_ms``, ``ended_ms`` (store's clock) and ``outcome``. They must tell the
story the logs tell (rule 20 of ``docs/protocol.rst``):

* the numbers run on without a gap up to the record's attempt, whose runner, reason and start
  are the record's own;
* the last attempt's outcome follows the run's status (``running``, or ``handed_over`` when
  it was released and nobody took over yet; ``success``; ``failed``; an ``interrupted`` run's
  last attempt ``expired``, ``handed_over`` or ``interrupted``), and
  every earlier one ended ``expired`` or ``handed_over``: an attempt is ``expired`` only if
  another followed or the run was interrupted; only a running attempt has no end;
* on the store's clock each attempt ends before the next starts (not judged while the store's
  clock was stepped);
* the runner of each attempt is the instance that logged winning it, with the same reason;
  an attempt its runner logged as released (accepted) ended ``handed_over``, one logged as
  finished ended with that status, and an attempt stored as released or finished has such a
  line unless the line may be missing: its process was killed after it won, one of its
  finishes or releases got no answer (it may have landed), or it was won after its process got
  SIGTERM: the engine releases such a run at once, and its stop waits only 100 ms
  (``IN_FLIGHT_WAIT_S``) for claims in flight, so the process may exit during that release
  (likelier on a replicated store, where each release also waits for the replicas).

An attempt no instance logged winning (a SIGKILL between the store's answer and the line, an
unanswered claim) is counted as skipped for the checks that need its lines.
"""

from __future__ import annotations

from typing import List, Optional

from .model import Attempt, Model, Slot
from .report import InvariantResult

#: The outcome the last attempt may have, by the run's status.
LAST_OUTCOMES = {
    "running": ("running", "handed_over"),  # released: no attempt took over yet
    "success": ("success",),
    "failed": ("failed",),
    "interrupted": ("expired", "handed_over", "interrupted"),
}


def check_attempt_records(model: Model, slot: Slot, inv: InvariantResult) -> None:
    """Judge the stored attempts of ``slot``'s record (none kept: nothing to judge)."""
    rec = slot.record
    stored = list((rec or {}).get("attempts") or [])
    if rec is None or not stored:
        return
    inv.checked += 1
    problems = _shape(rec, stored) + _clock_order(model, slot, stored)
    for att in stored:
        problems += _against_logs(model, slot, att, inv)
    for problem in problems:
        inv.fail(f"{slot.label()}: {problem}")


def _shape(rec: dict, stored: List[dict]) -> List[str]:
    """The attempts' own story: numbers, the last one, the outcomes."""
    out = []
    numbers = [a.get("number") for a in stored]
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))) or numbers[-1] != rec.get("attempt"):
        out.append(f"attempts numbered {numbers}, the record's attempt is {rec.get('attempt')}")
    last = stored[-1]
    for key in ("runner", "reason", "started_ms"):
        if last.get(key) != rec.get(key):
            out.append(f"last attempt's {key} {last.get(key)!r}, the record's {rec.get(key)!r}")
    allowed = LAST_OUTCOMES.get(str(rec.get("status")), ())
    if last.get("outcome") not in allowed:
        out.append(f"run {rec.get('status')}, its last attempt #{last.get('number')} {last.get('outcome')}")
    for att in stored[:-1]:
        if att.get("outcome") not in ("expired", "handed_over"):
            out.append(f"attempt #{att.get('number')} {att.get('outcome')}, yet #{att.get('number', 0) + 1} followed")
    for att in stored:
        if (att.get("ended_ms") is None) != (att.get("outcome") == "running"):
            out.append(f"attempt #{att.get('number')} {att.get('outcome')} with ended_ms {att.get('ended_ms')}")
    return out


def _clock_order(model: Model, slot: Slot, stored: List[dict]) -> List[str]:
    """On the store's clock, each attempt starts after the one before ended."""
    wins = [a.won_t0 for atts in slot.attempts.values() for a in atts if a.won_t0 is not None]
    if model.clock_stepped(min(wins, default=0), model.end_ns):
        return []
    out = []
    for att, nxt in zip(stored, stored[1:]):
        ended, started = att.get("ended_ms"), nxt.get("started_ms")
        if isinstance(ended, int) and isinstance(started, int) and ended > started:
            out.append(
                f"attempt #{att.get('number')} ended at {ended}, after #{nxt.get('number')} started at {started}"
            )
    for att in stored:
        started, ended = att.get("started_ms"), att.get("ended_ms")
        if isinstance(started, int) and isinstance(ended, int) and ended < started:
            out.append(f"attempt #{att.get('number')} ended at {ended}, before it started at {started}")
    return out


def _against_logs(model: Model, slot: Slot, att: dict, inv: InvariantResult) -> List[str]:
    """One stored attempt against the lines of the instance that won it."""
    number = att.get("number")
    logged = [a for a in slot.attempts.get(int(number or 0), []) if a.won is not None]
    if not logged:
        inv.skipped += 1  # won without a line: nothing to compare with
        return []
    mine = [a for a in logged if a.runner == att.get("runner")]
    if not mine:
        return [f"attempt #{number} stored as {att.get('runner')}'s, but {logged[0].label()} logged winning it"]
    won = mine[0]
    out = []
    assert won.won is not None
    if won.won.get("reason") != att.get("reason"):
        out.append(f"attempt #{number} stored with reason {att.get('reason')}, won by a {won.won.get('reason')} claim")
    outcome = att.get("outcome")
    finishes, releases = won.accepted("finish"), won.accepted("release")
    if finishes and outcome != finishes[0].get("status"):
        out.append(f"attempt #{number} stored {outcome}, its runner's finish {finishes[0].get('status')} was accepted")
    elif not finishes and releases and outcome != "handed_over":
        out.append(f"attempt #{number} stored {outcome}, its runner's release was accepted")
    elif not finishes and not releases and outcome in ("success", "failed", "handed_over"):
        if _line_may_be_missing(model, won, outcome == "handed_over"):
            inv.skipped += 1
        else:
            out.append(f"attempt #{number} stored {outcome}, but {won.label()} logged no accepted finish or release")
    return out


def _line_may_be_missing(model: Model, att: Attempt, released: bool) -> bool:
    """Whether a finish or release (``released``) the store accepted may have no ``ok`` line: the
    process was killed after the attempt was won, one of the attempt's finishes or releases got no
    answer, or a release of an attempt won after its process got SIGTERM, the nemesis's or the
    harness's final one (released at once, maybe while the process exited)."""
    if any(c["ev"] in ("finish", "release") and c.get("ok") is None for c in att.calls):
        return True
    proc = model.proc(att.pid)
    killed: Optional[int] = None if proc is None else proc.killed_ns
    termed: Optional[int] = None if proc is None else proc.termed_ns
    final = model.final_stop_ns
    if final is not None and proc is not None and proc.last_ns >= final and (termed is None or final < termed):
        termed = final  # still running at the harness's final SIGTERM: its first SIGTERM
    won_while_stopping = released and termed is not None and termed <= (att.won_t1 or 0)
    return (killed is not None and killed >= (att.won_t0 or 0)) or won_while_stopping
