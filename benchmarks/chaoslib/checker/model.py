"""The model: the instances' and the nemesis's log lines, indexed by attempt, slot and process,
with the faults and freezes they show."""

from __future__ import annotations

import bisect
import dataclasses
import json
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

from .report import INF, NS, AKey, Config, Line, SKey


@dataclasses.dataclass
class Attempt:
    """One attempt of a slot as the logs show it (keyed by job, slot, attempt, token)."""

    job: str
    slot_ms: int
    attempt: int
    token: str
    pid: Optional[int] = None
    runner: Optional[str] = None
    won: Optional[Line] = None
    start: Optional[Line] = None  # the first try's
    starts: List[Line] = dataclasses.field(default_factory=list)  # every try's, in time order
    ticks: List[int] = dataclasses.field(default_factory=list)
    calls: List[Line] = dataclasses.field(default_factory=list)  # heartbeat, finish, release
    handler: List[Line] = dataclasses.field(default_factory=list)  # abort, sink, end
    events: List[Line] = dataclasses.field(default_factory=list)  # start, success, failed, lost, handover, retry
    end: Optional[Line] = None  # the last try's
    lost: Optional[Line] = None

    def label(self) -> str:
        """``job@slot #attempt (runner pid)`` for messages."""
        return f"{self.job}@{self.slot_ms} #{self.attempt} ({self.runner} pid {self.pid})"

    @property
    def won_t0(self) -> Optional[int]:
        """When the winning claim was sent."""
        return None if self.won is None else self.won.get("t0_mono_ns")

    @property
    def won_t1(self) -> Optional[int]:
        """When the winning claim's answer came back."""
        return None if self.won is None else self.won.get("t1_mono_ns")

    @property
    def start_ns(self) -> Optional[int]:
        """When the handler began (the ``start`` line), else the claim's answer."""
        return self.start["mono_ns"] if self.start is not None else self.won_t1

    def renewals(self) -> List[Tuple[int, int]]:
        """(sent, received) of each call that set this attempt's lease: the won claim, accepted heartbeats."""
        out = []
        if self.won is not None:
            out.append((self.won["t0_mono_ns"], self.won["t1_mono_ns"]))
        out += [
            (c["sent_mono_ns"], c["recv_mono_ns"]) for c in self.calls if c["ev"] == "heartbeat" and c.get("ok") is True
        ]
        return sorted(out)

    def accepted(self, ev: str) -> List[Line]:
        """The calls of kind ``ev`` the store accepted."""
        return [c for c in self.calls if c["ev"] == ev and c.get("ok") is True]

    def ended_sent(self, record: Optional[dict] = None) -> Optional[int]:
        """When the first finish or release that may have ended the run was sent: one the store
        accepted, or one that got no answer (it may have landed: an ambiguous write), unless the
        final ``record`` shows this very attempt still running."""
        still_running = record is not None and record.get("token") == self.token and record.get("status") == "running"
        sent = [
            c["sent_mono_ns"]
            for c in self.calls
            if c["ev"] in ("finish", "release") and (c.get("ok") is True or (c.get("ok") is None and not still_running))
        ]
        return min(sent) if sent else None

    def refused_before(self, t: int) -> bool:
        """Whether a call of this attempt was refused (ok false) with its answer before ``t``."""
        return any(c.get("ok") is False and c["recv_mono_ns"] <= t for c in self.calls)


@dataclasses.dataclass
class Slot:
    """A slot of a job: the claims for it, its attempts, and its stored record."""

    job: str
    slot_ms: int
    claims: List[Line] = dataclasses.field(default_factory=list)
    attempts: Dict[int, List[Attempt]] = dataclasses.field(default_factory=dict)
    record: Optional[dict] = None

    def label(self) -> str:
        """``job@slot`` for messages."""
        return f"{self.job}@{self.slot_ms}"

    def ordered(self) -> List[Attempt]:
        """One attempt per number, in attempt order (the first logged if a number was won twice)."""
        return [self.attempts[n][0] for n in sorted(self.attempts)]


@dataclasses.dataclass
class Proc:
    """One instance process (an incarnation of a runner)."""

    pid: int
    runner: Optional[str] = None
    first_ns: int = INF
    last_ns: int = 0
    running_ns: Optional[int] = None
    stopped_ns: Optional[int] = None
    killed_ns: Optional[int] = None
    termed_ns: Optional[int] = None
    frozen: List[List[int]] = dataclasses.field(default_factory=list)  # [stop, cont or INF]
    resumed: List[Tuple[int, int]] = dataclasses.field(default_factory=list)  # (frozen since, SIGCONT)
    #: (sent, answered, changed the store: a won claim, an accepted call) of each store write.
    writes: List[Tuple[int, int, bool]] = dataclasses.field(default_factory=list)
    #: [from, to] of each time the process logged nothing while a handler of it ticked (starved).
    starved: List[Tuple[int, int]] = dataclasses.field(default_factory=list)

    def seen(self, t: int) -> None:
        """A line of this process at ``t``."""
        self.first_ns = min(self.first_ns, t)
        self.last_ns = max(self.last_ns, t)

    def gone_ns(self) -> int:
        """When it stopped being an instance: killed, asked to stop, or stopped; INF if never."""
        times = [t for t in (self.killed_ns, self.termed_ns, self.stopped_ns) if t is not None]
        return min(times) if times else INF

    def frozen_during(self, a: int, b: int) -> bool:
        """Whether the process was SIGSTOPped at some time in ``[a, b]``."""
        return any(s <= b and e >= a for s, e in self.frozen)

    def starved_ns(self, a: int, b: int) -> int:
        """How long, within ``[a, b]``, the process was starved of CPU (:func:`_find_starved`)."""
        return sum(max(0, min(e, b) - max(s, a)) for s, e in self.starved)

    def frozen_at(self, t: int) -> bool:
        """Whether the process was SIGSTOPped at ``t``."""
        return any(s <= t < e for s, e in self.frozen)

    def resume_marks(self, tolerance_ns: int) -> List[int]:
        """When the process ran again after each SIGCONT, as early as the logs allow.

        A nemesis that logs ``cont`` after sending the signal lets the resumed
        process log a line or two first: a resume counts from ``tolerance``
        before its ``cont`` line, but never before the freeze began.
        """
        return sorted(max(since, cont - tolerance_ns) for since, cont in self.resumed)

    def next_freeze(self, t: int) -> int:
        """When the process was next SIGSTOPped after ``t`` (INF if never)."""
        return min((s for s, _ in self.frozen if s > t), default=INF)

    def may_hold_write_lock(self, stop: int, cont: int) -> bool:
        """Whether the process, frozen from ``stop`` to ``cont``, may have held SQLite's write lock.

        Only a store write (claim, heartbeat, finish, release; each one transaction) takes the
        lock, and a frozen process takes none: it held the lock if it froze inside a write, so a
        write of it was in flight across the freeze. Where its lines cannot show that, it may
        have: before its first write was answered (its first operation, even a read, creates the
        schema in a write), or when it logged nothing after the freeze (killed while frozen, the
        logs end): a write in flight then never logged its line.
        """
        if self.last_ns < cont or stop < min((answered for _, answered, _ in self.writes), default=INF):
            return True
        return any(sent <= cont and answered >= stop for sent, answered, _ in self.writes)


#: A process that logged nothing for longer than this while a handler of it ticked was starved.
STARVED_NS = 100 * NS
PROCESS_ACTIONS = {"kill", "stop", "cont", "term", "start-instance"}
#: The store calls that write, and the fields of their send and answer times.
WRITE_CALLS = {
    "claim": ("t0_mono_ns", "t1_mono_ns"), "heartbeat": ("sent_mono_ns", "recv_mono_ns"),
    "finish": ("sent_mono_ns", "recv_mono_ns"), "release": ("sent_mono_ns", "recv_mono_ns"),
}  # fmt: skip
FAULT_ENDS = {
    "stall": ("unstall",), "partition": ("heal",), "latency": ("unlatency", "heal"), "clock-step": ("clock-back",),
}  # fmt: skip
RECOVERY_ACTIONS = {"unstall", "heal", "unlatency", "clock-back"}


class Model:
    """The logs indexed by attempt, slot and process, plus the nemesis's faults."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.attempts: Dict[AKey, Attempt] = {}
        self.slots: Dict[SKey, Slot] = {}
        self.procs: Dict[int, Proc] = {}
        self.nemesis: List[Line] = []
        self.claims: List[Line] = []
        self.lost_events: List[Line] = []
        self.handover_events: List[Line] = []
        self.skip_events: List[Line] = []
        self.sink_lines: List[Line] = []
        self.faults: List[Tuple[Optional[str], int, int]] = []  # scope runner (None: all), start, end
        self.clock_steps: List[Tuple[int, int]] = []  # the store's clock was off: from the step to the step back
        #: On SQLite, the freezes of instances that may have held the file's write lock (stop, cont):
        #: every other instance's writes waited meanwhile, as in a stall of the store.
        self.frozen_writers: List[Tuple[int, int]] = []
        self.stores: Set[str] = set()
        #: The longest time between two slots of any schedule a job had, where a change gave it one
        #: other than the code's (ms; ``checker/schedules.py``).
        self.gaps: Dict[str, int] = {}
        #: When a delete of each stored job was sent, answered or not (``checker/schedules.py``).
        self.deletes: Dict[str, List[int]] = {}
        self.end_ns = 0
        self.malformed = 0
        #: When the harness began the final SIGTERMs of every instance (``harness.jsonl``), if logged.
        self.final_stop_ns: Optional[int] = None

    # -- lookups -----------------------------------------------------------------------------

    def slot(self, job: str, slot_ms: int) -> Slot:
        """The slot, created on first use."""
        key = (job, slot_ms)
        if key not in self.slots:
            self.slots[key] = Slot(job, slot_ms)
        return self.slots[key]

    def attempt(self, key: AKey, line: Line) -> Attempt:
        """The attempt of ``key``, created on first use (with the line's runner and pid)."""
        att = self.attempts.get(key)
        if att is None:
            att = self.attempts[key] = Attempt(*key)
            self.slot(key[0], key[1]).attempts.setdefault(key[2], []).append(att)
        if att.pid is None:
            att.pid, att.runner = line.get("pid"), line.get("runner")
        return att

    def proc(self, pid: Optional[int]) -> Optional[Proc]:
        """The process of ``pid``."""
        return None if pid is None else self.procs.get(pid)

    def settle_ns(self) -> int:
        """How long a fault's effects are taken to outlast it."""
        return (self.config.lease_ms + 2 * self.config.heartbeat_ms) * NS

    def faulted(
        self, a: int, b: int, runner: Optional[str] = None, any_scope: bool = False, frozen_writers: bool = False
    ) -> bool:
        """Whether a store or network fault (of all runners, or of ``runner``) touched ``[a, b]``.

        With ``frozen_writers`` a freeze of :attr:`frozen_writers` counts as a fault of all
        runners: the checks of a delay ask for it (a frozen lock holder holds up every write, as
        a stalled store does); the others do not (it delays writes and changes no outcome, and a
        runner stops by its local deadline whatever the store does).
        """
        settle = self.settle_ns()
        faults = self.faults + [(None, s, e) for s, e in self.frozen_writers] if frozen_writers else self.faults
        return any(
            (any_scope or scope is None or scope == runner) and s <= b and e + settle >= a for scope, s, e in faults
        )

    def clock_stepped(self, a: int, b: int, after_ns: int = 0) -> bool:
        """Whether the store's clock was stepped away at some time in ``[a, b]``, or less than
        ``after_ns`` before ``a`` (an instance's estimate of it may stay off until it syncs again)."""
        return any(s <= b and e + after_ns >= a for s, e in self.clock_steps)

    def nemesis_in(self, actions: Set[str], a: int, b: int, pid: Optional[int] = None) -> List[Line]:
        """The nemesis lines with one of ``actions`` in ``[a, b]`` (of process ``pid`` if given)."""
        return [
            n
            for n in self.nemesis
            if n.get("action") in actions and a <= n["mono_ns"] <= b and (pid is None or n.get("pid") == pid)
        ]

    def available(self, a: int, b: int, exclude: Optional[int]) -> bool:
        """Whether some other instance ran (started, not frozen, not stopping, still logging) throughout ``[a, b]``."""
        for proc in self.procs.values():
            if proc.pid == exclude or proc.running_ns is None or proc.running_ns > a:
                continue
            if proc.gone_ns() <= b or proc.frozen_during(a, b) or proc.last_ns < b:
                continue
            return True
        return False


def _akey(line: Line) -> Optional[AKey]:
    job, slot, attempt, token = line.get("job"), line.get("slot_ms"), line.get("attempt"), line.get("token")
    if isinstance(job, str) and isinstance(slot, int) and isinstance(attempt, int) and isinstance(token, str):
        return (job, slot, attempt, token)
    return None


def _read_logs(log_dir: Path, model: Model) -> Tuple[List[Line], Dict[AKey, List[Tuple[int, Optional[int]]]]]:
    """Every line but ticks (sorted by mono_ns), and the ticks per attempt: (mono_ns, pid)."""
    lines: List[Line] = []
    ticks: Dict[AKey, List[Tuple[int, Optional[int]]]] = {}
    for path in sorted(Path(log_dir).glob("*.jsonl")):
        with path.open("r", encoding="utf-8", errors="replace") as f:
            for raw in f:
                line = _parse(raw)
                if line is None:
                    model.malformed += raw.strip() != ""
                    continue
                if line["ev"] == "tick":
                    key = _akey(line)
                    if key is not None:
                        ticks.setdefault(key, []).append((line["mono_ns"], line.get("pid")))
                    continue
                lines.append(line)
    lines.sort(key=lambda ln: ln["mono_ns"])
    return lines, ticks


def _parse(raw: str) -> Optional[Line]:
    raw = raw.strip()
    if not raw:
        return None
    try:
        line = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(line, dict) or not isinstance(line.get("ev"), str) or not isinstance(line.get("mono_ns"), int):
        return None
    return line


def build_model(log_dir: Path, final_runs: Dict[str, List[dict]], config: Config) -> Model:
    """Read the logs and records into a :class:`Model`."""
    model = Model(config)
    lines, ticks = _read_logs(log_dir, model)
    for line in lines:
        _index(model, line)
    for key, marks in ticks.items():
        att = model.attempts.get(key)
        if att is None:
            att = model.attempt(key, {"pid": marks[0][1]})
        att.ticks = sorted(t for t, _ in marks)
        for t, pid in marks:
            if pid is not None:
                model.procs.setdefault(pid, Proc(pid)).seen(t)
        model.end_ns = max(model.end_ns, att.ticks[-1])
    _apply_nemesis(model)
    _close_unlogged_resumes(model, lines, ticks)
    _find_frozen_writers(model)
    _find_starved(model, lines, ticks)
    for job, runs in final_runs.items():
        for run in runs:
            model.slot(job, int(run["slot_ms"])).record = run
    return model


def _close_unlogged_resumes(
    model: Model, lines: List[Line], ticks: Dict[AKey, List[Tuple[int, Optional[int]]]]
) -> None:
    """A process frozen with no ``cont`` logged that logs again was resumed by then (say by the
    harness's final SIGCONT + SIGTERM): its first line after the freeze marks the resume."""
    open_since = {
        p.pid: p.frozen[-1][0]
        for p in model.procs.values()
        if p.frozen and p.frozen[-1][1] == INF and p.killed_ns is None
    }
    if not open_since:
        return
    first: Dict[int, int] = {}
    marks = [(ln["mono_ns"], ln.get("pid")) for ln in lines] + [m for ms in ticks.values() for m in ms]
    for t, pid in marks:
        if pid in open_since and t > open_since[pid] + NS and t < first.get(pid, INF):
            first[pid] = t
    for pid, t in first.items():
        proc = model.procs[pid]
        proc.frozen[-1][1] = t
        proc.resumed.append((proc.frozen[-1][0], t))


def _find_starved(model: Model, lines: List[Line], ticks: Dict[AKey, List[Tuple[int, Optional[int]]]]) -> None:
    """Find when each process was starved of CPU: it logged no line at all for over
    :data:`STARVED_NS` while one of its handlers was ticking (a tick every 10 ms), as on a
    loaded host during a failover. Timing bounds of what the process does then allow for it."""
    times: Dict[int, List[int]] = {}
    for t, pid in [(ln["mono_ns"], ln.get("pid")) for ln in lines] + [m for ms in ticks.values() for m in ms]:
        if pid is not None:
            times.setdefault(pid, []).append(t)
    for marks in times.values():
        marks.sort()
    found: Dict[int, Set[Tuple[int, int]]] = {}
    for key, marks in ticks.items():
        pid, att = marks[0][1], model.attempts[key]
        if pid is None:
            continue
        ends = sorted(h["mono_ns"] for h in att.handler if h["ev"] == "end")
        tries = [(s["mono_ns"], next((e for e in ends if e >= s["mono_ns"]), INF)) for s in att.starts]
        ticked = sorted(t for t, _ in marks)
        for a, b in zip(ticked, ticked[1:]):  # two ticks of one try (not the wait between two tries)
            if b - a <= STARVED_NS or not any(s <= a and b <= e for s, e in tries):
                continue
            seen = times[pid][bisect.bisect_left(times[pid], a) : bisect.bisect_right(times[pid], b)]
            found.setdefault(pid, set()).update((s, e) for s, e in zip(seen, seen[1:]) if e - s > STARVED_NS)
    for pid, gaps in found.items():
        model.procs[pid].starved = sorted(gaps)


def _find_frozen_writers(model: Model) -> None:
    """On SQLite, :attr:`Model.frozen_writers`: the freezes in which the process may have held the
    write lock (:meth:`Proc.may_hold_write_lock`) and nobody else is seen holding it.

    A frozen process neither takes nor gives up the lock, so it held none throughout its freeze
    when another holder is seen inside it: the nemesis's locker or killed writer (``how:
    sqlite-lock``, ``sqlite-writer-killed``: it had the lock from before its line for its
    ``duration_ms``), or another process's write that changed the store (a won claim, an
    accepted call), sent after the SIGSTOP and answered before the SIGCONT."""
    if not model.stores & {"sqlite", ""}:
        return
    helpers = [
        (n["mono_ns"], n["mono_ns"] + int(n.get("duration_ms") or 0) * NS)
        for n in model.nemesis
        if n.get("action") == "store-restart" and n.get("how") in ("sqlite-lock", "sqlite-writer-killed")
    ]
    commits = sorted(
        (sent, answered, p.pid) for p in model.procs.values() for sent, answered, changed in p.writes if changed
    )
    sent_times = [c[0] for c in commits]

    def other_wrote(pid: int, stop: int, cont: int) -> bool:
        for sent, answered, writer in commits[bisect.bisect_left(sent_times, stop) :]:
            if sent > cont:
                return False
            if writer != pid and answered <= cont:
                return True
        return False

    for proc in model.procs.values():
        for stop, cont in proc.frozen:
            if not proc.may_hold_write_lock(stop, cont):
                continue
            if any(s <= cont and e >= stop for s, e in helpers) or other_wrote(proc.pid, stop, cont):
                continue
            model.frozen_writers.append((stop, cont))


def _index(model: Model, line: Line) -> None:
    ev, t = line["ev"], line["mono_ns"]
    model.end_ns = max(model.end_ns, t)
    if ev == "nemesis":
        model.nemesis.append(line)
        return
    if ev == "final-stop":
        model.final_stop_ns = t
        return
    pid = line.get("pid")
    if isinstance(pid, int):
        proc = model.procs.setdefault(pid, Proc(pid, line.get("runner")))
        proc.seen(t)
        if ev == "ready" and isinstance(line.get("store"), str):
            model.stores.add(line["store"])
        elif ev == "running":
            proc.running_ns = t
        elif ev == "stopped":
            proc.stopped_ns = t
        elif ev in WRITE_CALLS:
            sent, answered = (line.get(key) for key in WRITE_CALLS[ev])
            if isinstance(sent, int) and isinstance(answered, int):
                proc.writes.append((sent, answered, line.get("outcome") == "won" or line.get("ok") is True))
    handler = _INDEXERS.get(ev)
    if handler is not None:
        handler(model, line)


def _index_claim(model: Model, line: Line) -> None:
    model.claims.append(line)
    if not isinstance(line.get("job"), str) or not isinstance(line.get("slot_ms"), int):
        return
    slot = model.slot(line["job"], line["slot_ms"])
    slot.claims.append(line)
    if line.get("outcome") == "won":
        key = _akey(line)
        if key is not None:
            att = model.attempt(key, line)
            if att.won is None:
                att.won = line


def _index_attempt_line(model: Model, line: Line) -> None:
    key = _akey(line)
    if key is None:
        return
    att = model.attempt(key, line)
    ev = line["ev"]
    if ev == "start":
        att.start = att.start or line
        att.starts.append(line)
    elif ev in ("heartbeat", "finish", "release"):
        att.calls.append(line)
    else:
        att.handler.append(line)
        if ev == "end":
            att.end = line
        elif ev == "sink":
            model.sink_lines.append(line)


def _index_event(model: Model, line: Line) -> None:
    kind = line.get("type")
    if kind == "lost":
        model.lost_events.append(line)
    elif kind == "handover":
        model.handover_events.append(line)
    elif kind == "skip":
        model.skip_events.append(line)
    if kind not in ("start", "success", "failed", "lost", "handover", "retry"):
        return
    key = _akey(line)
    if key is None:
        return
    att = model.attempt(key, line)
    att.events.append(line)
    if kind == "lost" and att.lost is None:
        att.lost = line


_INDEXERS: Dict[str, Callable[[Model, Line], None]] = {
    "claim": _index_claim,
    "start": _index_attempt_line,
    "heartbeat": _index_attempt_line,
    "finish": _index_attempt_line,
    "release": _index_attempt_line,
    "abort": _index_attempt_line,
    "sink": _index_attempt_line,
    "end": _index_attempt_line,
    "event": _index_event,
}


def _resolve_pid(model: Model, line: Line) -> Optional[int]:
    """The process a nemesis line concerns: its ``pid``, else the runner's latest incarnation by then."""
    pid = line.get("pid")
    if isinstance(pid, int):
        return pid
    runner = line.get("runner")
    best: Optional[Proc] = None
    for proc in model.procs.values():
        if (
            proc.runner == runner
            and proc.first_ns <= line["mono_ns"]
            and (best is None or proc.first_ns > best.first_ns)
        ):
            best = proc
    return None if best is None else best.pid


def _apply_nemesis(model: Model) -> None:
    model.nemesis.sort(key=lambda n: n["mono_ns"])
    open_faults: Dict[Tuple[Optional[str], str], int] = {}
    for line in model.nemesis:
        action, t = line.get("action"), line["mono_ns"]
        if action in PROCESS_ACTIONS:
            pid = _resolve_pid(model, line)
            line["pid"] = pid
            if pid is not None:
                _apply_signal(model.procs.setdefault(pid, Proc(pid, line.get("runner"))), action, t)
        else:
            _apply_fault(model, open_faults, line)
    for (scope, kind), start in open_faults.items():
        model.faults.append((scope, start, INF))
        if kind == "clock-step":
            model.clock_steps.append((start, INF))


def _apply_signal(proc: Proc, action: str, t: int) -> None:
    if action == "kill":
        proc.killed_ns = t if proc.killed_ns is None else min(proc.killed_ns, t)
        for interval in proc.frozen:
            interval[1] = min(interval[1], t)
    elif action == "term":
        proc.termed_ns = t if proc.termed_ns is None else min(proc.termed_ns, t)
    elif action == "stop":
        if not proc.frozen or proc.frozen[-1][1] != INF:
            proc.frozen.append([t, INF])
    elif action == "cont" and proc.frozen and proc.frozen[-1][1] == INF:
        proc.frozen[-1][1] = t
        proc.resumed.append((proc.frozen[-1][0], t))


def _apply_fault(model: Model, open_faults: Dict[Tuple[Optional[str], str], int], line: Line) -> None:
    action, t, scope = str(line.get("action")), line["mono_ns"], line.get("runner")
    ends_latency = action == "latency" and any(line.get(k) == 0 for k in ("ms", "latency_ms", "delay_ms"))
    if action in RECOVERY_ACTIONS or ends_latency:
        for (s, kind), start in list(open_faults.items()):
            if s == scope and (action in FAULT_ENDS.get(kind, ()) or (ends_latency and kind == "latency")):
                model.faults.append((s, start, t))
                if kind == "clock-step":
                    model.clock_steps.append((start, t))
                del open_faults[(s, kind)]
    elif action in FAULT_ENDS:
        open_faults.setdefault((scope, action), t)
    else:  # a point in time, or lasting duration_ms (a store restart is stamped at the crash)
        duration = line.get("duration_ms")
        model.faults.append((scope, t, t + (int(duration) * NS if isinstance(duration, (int, float)) else 0)))
