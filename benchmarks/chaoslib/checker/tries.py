"""Tries and timeouts: a job's ``timeout_ms`` enforced, its ``retries`` run one try at a time.

Each try of a handler logs ``start`` … ``end`` with its ``try_number`` (``chaoslib.handlers``);
the lines of every try belong to their attempt, so the safety checks (``overlap_window``,
``local_deadline``, ``lost_in_time``) judge every try's ticks, and the grace ticks of a try
that works on past its timeout, as the attempt's handler work. What is judged here:

``timeout_enforced`` (each attempt of a job with ``timeout_ms`` T that began a try)
    * the signal aborts with reason ``timeout`` (the handler's ``abort`` line) no sooner
      than T after the winning claim was answered (the attempt's clock starts after it), and
      no later than T + margin after the first try began: a handler still at work past then
      that saw no abort is a violation, unless its process was frozen meanwhile (the time
      it was starved of CPU, :func:`~chaoslib.checker.model._find_starved`, extends the bound);
    * a try working on past the timeout (``abort`` with ``ignored_ms``) keeps its lease:
      heartbeats go on throughout, one in flight or due within ``heartbeat + margin`` of the
      last answer or of its process's waking from a freeze (plus any time the process was
      starved), until its handler ended or its run was reported ``lost``;
    * after a timeout the attempt ends ``failed`` with ``timed out after T ms``: its accepted
      finish, its ``failed`` event (reason ``timeout``), and the record when it holds this
      attempt finished (not ``interrupted``: a lease that ran out); it is never released
      (but for a heartbeat answered after it was ``lost``: that stray renewal is released). A
      finish with that text needs a job with that T and an attempt that ran for T.
``tries_sequential`` (each attempt that began a try)
    * its tries are numbered 1..k in time order (a backup's attempt begins at try 1), k <=
      ``retries`` + 1; try n+1 begins after try n ended ``raised``, after a ``retry`` event
      for try n, no sooner than ``retry_delay_ms`` x 2^(n-1) and no later than that plus a
      quarter of ``retry_delay_ms`` and the margin (unless the process was frozen; plus the
      time it was starved: it logged no line while a handler of it ticked), and never
      after the attempt was aborted or lost; its ``success``/``failed``/``handover`` event
      names try k.
``retry_outcome`` (each slot recorded ``success`` or ``failed``, of an attempt that logged tries)
    * ``success``: the attempt's last try returned; ``failed`` (not a timeout): its last try
      raised or was aborted, and a planned failure ended all ``retries`` + 1 tries, the record
      holding the last try's error.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from .bounds import Bounds, fmt_ms
from .model import Attempt, Model, Slot
from .report import CLOCK_SLACK_MS, INF, NS, InvariantResult, JobConfig, Line

#: The error a run that ran past its ``timeout_ms`` is recorded with (``leasecron.engine.tries``).
TIMED_OUT = re.compile(r"^timed out after (\d+) ms$")
#: The longest wait between two tries of one heartbeat (``leasecron.engine.store_calls``: 1 s + 20 ms jitter).
BACKOFF_MAX_MS = 1_020
#: The try number in the error of a planned failure (``chaoslib.handlers``).
PLANNED_TRY = re.compile(r"planned failure \(try (\d+)\)")


def _job(model: Model, att: Attempt) -> JobConfig:
    return model.config.jobs.get(att.job, JobConfig(0, "allow"))


def try_of(line: Line) -> int:
    """A handler line's try number (1 for a line that names none)."""
    number = line.get("try_number")
    return number if isinstance(number, int) else 1


def _activity(att: Attempt) -> List[int]:
    """When the attempt's handler was at work: its ticks and handler lines, in time order."""
    return sorted(att.ticks + [h["mono_ns"] for h in att.handler] + [s["mono_ns"] for s in att.starts])


def _frozen(model: Model, att: Attempt, a: int, b: int) -> bool:
    proc = model.proc(att.pid)
    return proc is not None and proc.frozen_during(a, b)


def _thawed(model: Model, att: Attempt, t: int) -> int:
    """When the attempt's process last woke from a freeze (SIGCONT) at or before ``t``; 0 if never."""
    proc = model.proc(att.pid)
    return 0 if proc is None else max((e for _, e in proc.frozen if e <= t), default=0)


def _starved(model: Model, att: Attempt, a: int, b: int) -> int:
    """How long (ns) the attempt's process was starved of CPU within ``[a, b]``."""
    proc = model.proc(att.pid)
    return 0 if proc is None else proc.starved_ns(a, b)


# ---------------------------------------------------------------------------------------------
# timeout_enforced
# ---------------------------------------------------------------------------------------------


def check_timeout(model: Model, att: Attempt, b: Bounds, inv: InvariantResult) -> None:
    """Judge one attempt against its job's ``timeout_ms`` (see the module docstring)."""
    finishes = [c for c in att.accepted("finish") if TIMED_OUT.match(str(c.get("failure") or ""))]
    timeout = _job(model, att).timeout_ms
    if timeout is None:
        if finishes:
            inv.checked += 1
            inv.fail(f"{att.label()} finished {finishes[0].get('failure')!r}, but its job has no timeout_ms")
        return
    if att.start is None:
        return
    if att.won_t1 is None:  # won without a line (its claim unanswered, or a SIGKILL before the line)
        inv.skipped += 1
        return
    inv.checked += 1
    problems = _abort_in_time(model, att, timeout, b) + _renewed_past_timeout(model, att, b)
    problems += _recorded_timed_out(model, att, timeout, finishes)
    for problem in problems:
        inv.fail(f"{att.label()}: {problem}")


def _timeout_abort(att: Attempt) -> Optional[Line]:
    return next((h for h in att.handler if h["ev"] == "abort" and h.get("reason") == "timeout"), None)


def _abort_in_time(model: Model, att: Attempt, timeout: int, b: Bounds) -> List[str]:
    assert att.start is not None and att.won_t1 is not None
    abort = _timeout_abort(att)
    if abort is not None and abort["mono_ns"] < att.won_t1 + (timeout - CLOCK_SLACK_MS) * NS:
        early = fmt_ms(abort["mono_ns"] - att.won_t1)
        return [f"aborted 'timeout' {early} after its claim was answered, before timeout_ms {timeout} ms"]
    aborts = [h["mono_ns"] for h in att.handler if h["ev"] == "abort"]
    noticed = min(aborts + ([att.end["mono_ns"]] if att.end is not None else []), default=INF)  # the last try's end
    starved = _starved(model, att, att.start["mono_ns"], min(noticed, model.end_ns))
    due = att.start["mono_ns"] + int((timeout + b.margin_ms) * NS) + starved
    late = [t for t in _activity(att) if t > due and t <= noticed]
    if not late or noticed <= due:
        return []
    if _frozen(model, att, att.start["mono_ns"] + timeout * NS, late[-1]):
        return []  # the timers could not run while it was frozen
    return [f"still at work {fmt_ms(late[-1] - att.start['mono_ns'])} after its first try began, no timeout seen"
            f" (timeout_ms {timeout} ms + margin {b.margin_ms:.0f} ms)"]  # fmt: skip


def _renewed_past_timeout(model: Model, att: Attempt, b: Bounds) -> List[str]:
    """A try working on past its timeout keeps renewing: from the timeout (or the first beat's
    due time) until its handler's last line or its ``lost``, a heartbeat is always in flight or
    due, within ``heartbeat`` (:data:`BACKOFF_MAX_MS` after a call that raised) + margin of the
    last answer, or within the margin of its process's waking from a freeze."""
    abort = _timeout_abort(att)
    if abort is None or not abort.get("ignored_ms"):
        return []
    margin_ns = int(b.margin_ms * NS)
    after = [t for t in _activity(att) if t >= abort["mono_ns"]]
    until = min(after[-1:] + ([att.lost["mono_ns"]] if att.lost is not None else []), default=abort["mono_ns"])
    reach = max(abort["mono_ns"], (att.won_t1 or 0) + model.config.heartbeat_ms * NS + margin_ns)
    for c in sorted((c for c in att.calls if c["ev"] == "heartbeat"), key=lambda c: c["sent_mono_ns"]):
        if reach >= until:
            return []
        pause_ms = BACKOFF_MAX_MS if c.get("ok") is None else model.config.heartbeat_ms
        # the timers that fell due in a freeze all run on waking, the timeout's and the beat's in either order
        reach = max(reach, _thawed(model, att, c["sent_mono_ns"]) + margin_ns)
        late = c["sent_mono_ns"] > reach + _starved(model, att, reach, c["sent_mono_ns"])
        if late and not _frozen(model, att, reach, c["sent_mono_ns"]):
            return [f"no heartbeat for {fmt_ms(c['sent_mono_ns'] - reach)} while it worked past its timeout"
                    f" ({fmt_ms(reach - abort['mono_ns'])} after it)"]  # fmt: skip
        reach = max(reach, c["recv_mono_ns"] + pause_ms * NS + margin_ns)
    proc = model.proc(att.pid)
    in_flight = proc is not None and proc.killed_ns is not None and proc.killed_ns >= reach  # its line never came
    reach = max(reach, _thawed(model, att, until) + margin_ns)
    reach += _starved(model, att, reach, until)
    if reach < until and not in_flight and not _frozen(model, att, reach, until):
        return [f"no heartbeat in the last {fmt_ms(until - reach)} while it worked past its timeout"]
    return []


def _recorded_timed_out(model: Model, att: Attempt, timeout: int, finishes: List[Line]) -> List[str]:
    out = []
    text = f"timed out after {timeout} ms"
    abort = _timeout_abort(att)
    for c in finishes:
        if c.get("failure") != text:
            out.append(f"finished {c.get('failure')!r}, its job's timeout_ms is {timeout} ms")
        elif abort is None and c["sent_mono_ns"] < (att.won_t1 or 0) + (timeout - CLOCK_SLACK_MS) * NS:
            out.append(f"finished {text!r} {fmt_ms(c['sent_mono_ns'] - (att.won_t1 or 0))} after it was won")
    if abort is None:
        return out
    for c in att.accepted("finish"):
        if c.get("status") != "failed" or c.get("failure") != text:
            out.append(f"timed out, yet finished {c.get('status')} {c.get('failure')!r}")
    lost = INF if att.lost is None else att.lost["mono_ns"]  # then a stray renewal is released: no hand-over
    out += [f"timed out, yet released (sent {fmt_ms(c['sent_mono_ns'] - abort['mono_ns'])} after the timeout)"
            for c in att.accepted("release") if abort["mono_ns"] < c["sent_mono_ns"] < lost]  # fmt: skip
    for ev in att.events:
        if ev.get("type") == "failed" and (ev.get("reason") != "timeout" or ev.get("error") != text):
            out.append(f"timed out, yet its failed event says reason {ev.get('reason')!r} error {ev.get('error')!r}")
        elif ev.get("type") in ("success", "handover"):
            out.append(f"timed out, yet its instance emitted {ev.get('type')}")
    rec = model.slot(att.job, att.slot_ms).record  # interrupted: its lease ran out (killed, frozen, lost)
    if rec is not None and rec.get("token") == att.token and rec.get("status") in ("success", "failed"):
        if rec.get("status") != "failed" or rec.get("error") != text:
            out.append(f"timed out, yet recorded {rec.get('status')} {rec.get('error')!r}")
    return out


# ---------------------------------------------------------------------------------------------
# tries_sequential
# ---------------------------------------------------------------------------------------------


def _by_try(lines: List[Line], ev: str) -> Dict[int, Line]:
    """The first line of kind ``ev`` of each try."""
    out: Dict[int, Line] = {}
    for line in lines:
        if line["ev"] == ev:
            out.setdefault(try_of(line), line)
    return out


def check_tries(model: Model, att: Attempt, b: Bounds, inv: InvariantResult) -> None:
    """Judge the tries of one attempt (see the module docstring)."""
    if not att.starts:
        return
    inv.checked += 1
    job = _job(model, att)
    numbers = [try_of(s) for s in att.starts]
    problems = []
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"tries began numbered {numbers}" + (" (a backup begins at try 1)" if att.attempt > 1 else ""))
    if len(numbers) > job.retries + 1:
        problems.append(f"{len(numbers)} tries, with retries {job.retries}")
    ends = _by_try(att.handler, "end")
    retried = {try_of(ev): ev for ev in att.events if ev.get("type") == "retry"}
    stopped = min([h["mono_ns"] for h in att.handler if h["ev"] == "abort"]
                  + ([att.lost["mono_ns"]] if att.lost is not None else []), default=INF)  # fmt: skip
    for start in att.starts[1:]:
        problems += _next_try(model, att, job, start, ends.get(try_of(start) - 1), retried, stopped, b)
    last = len(numbers)
    for ev in att.events:
        if ev.get("type") in ("success", "failed", "handover") and ev.get("try_number") not in (None, last):
            problems.append(f"{ev['type']} event names try {ev.get('try_number')}, its last try was {last}")
    for problem in problems:
        inv.fail(f"{att.label()}: {problem}")


def _next_try(
    model: Model, att: Attempt, job: JobConfig, start: Line, before: Optional[Line], retried: Dict[int, Line],
    stopped: int, b: Bounds,
) -> List[str]:  # fmt: skip
    """Try ``n`` (``start``) against try ``n - 1`` (its ``end`` line ``before``)."""
    n, t = try_of(start), start["mono_ns"]
    # the engine reads the signal just before it calls the handler: an abort landing between that
    # read and the try's first line races it (the try then finds its signal aborted), so a try that
    # began within the margin after the abort is not judged a new try after it
    if stopped + b.margin_ms * NS < t:
        return [f"try {n} began {fmt_ms(t - stopped)} after the run was aborted or lost"]
    if before is None or before["mono_ns"] > t:
        return [f"try {n} began before try {n - 1} ended"]
    if before.get("outcome") != "raised":
        return [f"try {n} followed try {n - 1}, which ended {before.get('outcome')}"]
    out = []
    event = retried.get(n - 1)
    if event is None or event["mono_ns"] > t:
        out.append(f"try {n} began without a retry event for try {n - 1}")
    least_ms = min(job.retry_delay_ms * 2 ** (n - 2), 60_000)
    most_ms = least_ms + job.retry_delay_ms / 4 + b.margin_ms
    waited = t - before["mono_ns"]
    starved = _starved(model, att, before["mono_ns"], t)
    if waited < (least_ms - CLOCK_SLACK_MS) * NS:
        out.append(f"try {n} began {fmt_ms(waited)} after try {n - 1} raised, before its wait of {least_ms} ms")
    elif waited > most_ms * NS + starved and not _frozen(model, att, before["mono_ns"], t):
        also = f", and {fmt_ms(starved)} starved" if starved else ""
        out.append(f"try {n} began {fmt_ms(waited)} after try {n - 1} raised (wait {least_ms}..{most_ms:.0f} ms{also})")
    return out


# ---------------------------------------------------------------------------------------------
# retry_outcome
# ---------------------------------------------------------------------------------------------


def check_outcome(model: Model, slot: Slot, inv: InvariantResult) -> None:
    """Judge how the tries of the slot's final attempt ended against its record's status."""
    rec = slot.record
    if rec is None or rec.get("status") not in ("success", "failed") or TIMED_OUT.match(str(rec.get("error") or "")):
        return
    att = next((a for a in slot.attempts.get(int(rec["attempt"]), []) if a.token == rec.get("token")), None)
    if att is None or not att.starts:
        return  # won or run without lines: nothing to compare with
    inv.checked += 1
    job = model.config.jobs.get(slot.job, JobConfig(0, "allow"))
    k = try_of(att.starts[-1])
    end = att.end if att.end is not None and try_of(att.end) == k else None
    outcome = None if end is None else end.get("outcome")
    why: Optional[str] = None
    if rec["status"] == "success" and outcome != "returned":
        why = f"recorded success, but its last try ({k}) " + ("never ended" if end is None else f"ended {outcome}")
    elif rec["status"] == "failed" and outcome == "returned":
        why = f"recorded failed {rec.get('error')!r}, but its last try ({k}) returned"
    elif rec["status"] == "failed" and outcome == "raised" and k != job.retries + 1 and not _aborted(att):
        why = f"recorded failed after {k} tries of {job.retries + 1}, none aborted"
    elif rec["status"] == "failed":
        planned = PLANNED_TRY.search(str(rec.get("error") or ""))
        if planned is not None and int(planned.group(1)) != k:
            why = f"recorded failed with try {planned.group(1)}'s error, its last try was {k}"
    if why is not None:
        inv.fail(f"{att.label()}: {why}")


def _aborted(att: Attempt) -> bool:
    return any(h["ev"] == "abort" for h in att.handler)


def tries_effects(model: Model) -> Dict[str, int]:
    """The report's effects of timeouts and retries: runs timed out, those that worked on past
    their timeout, and tries after a first."""
    timed = [line for line in (_timeout_abort(a) for a in model.attempts.values()) if line is not None]
    return {
        "timeouts": len(timed),
        "timeouts_ignored": sum(1 for line in timed if line.get("ignored_ms")),
        "retried_tries": sum(1 for a in model.attempts.values() for s in a.starts if try_of(s) > 1),
    }
