"""The chaos checker: verifies a run's invariants from the instances' logs and the store's final records.

:func:`check` reads every ``*.jsonl`` file of a log directory (the
instances' lines, see :mod:`chaoslib.worker`, and the harness's
``nemesis.jsonl``) and the runs the store holds at the end, and returns a
:class:`Report`: for each invariant how many cases were checked and the
violations, each a one-line explanation naming job, slot, attempt and runner.
It is pure analysis: no process, no store, no clock.

Times come from ``mono_ns`` (CLOCK_MONOTONIC, shared by the processes of one
host); a store's lease is judged conservatively from the calls around it: a
renewal (won claim or accepted heartbeat) sent at ``s`` and answered at ``r``
was processed in ``[s, r]``, so the lease it set ran at least until ``s +
lease``. The bounds (``rtt`` is the p99 of heartbeat round trips of the run,
``margin`` :attr:`Config.margin_ms`, default 250 ms, covers thread scheduling
and ``run_forever``'s signal handling; ``rtt`` is taken from the heartbeats that
no fault or freeze touched, so a fault's delays are never folded into a bound:
an overlap or a late ``lost`` that a network or store fault of the older
runner touched is excused, counted as skipped):

* overlap window: ``heartbeat + rtt + tick + 50 ms``;
* takeover after SIGKILL: ``lease + 2 x heartbeat + rtt + margin``;
* hand-over after SIGTERM: ``2 x heartbeat + rtt + margin``;
* local deadline: last successful renewal sent + ``lease`` + ``margin``.

The invariants (names as in :attr:`Report.invariants`):

``tokens_unique``        every won attempt has its own token.
``attempts_sequential``  the attempts of a slot were won as 1..n, in order, without
                         duplicates; a gap is excused (skipped) only where a SIGKILL
                         could have hit between a won claim and its log line, or a
                         claim of the slot got no answer (an ambiguous write).
``record_last_token``    the stored record holds the last attempt and its token.
``one_finish``           at most one finish accepted per slot, with the record's
                         token and status.
``fencing``              every heartbeat, finish or release sent with an older
                         token after a newer attempt was won (or after its own
                         release) was refused.
``overlap_window``       the time covered by an older attempt's ticks after the
                         newer attempt's first tick (each tick covers ``tick_ms``) is
                         within the overlap bound, per stretch between SIGCONTs
                         of the older's process (frozen time cannot tick).
``lost_in_time``         an older attempt that still did anything after the newer
                         started logs ``lost`` within the overlap bound of that
                         start or of the SIGCONT that resumed it.
``local_deadline``       without a SIGSTOP, an attempt ticks no more past its local
                         deadline, and a handler still running then logs ``lost``
                         by it (when not fenced by a refusal). A ``lost`` that comes
                         late for a handler that had ended in time is no violation:
                         only the store's record of the end was pending.
``end_state``            every slot ends completed (success/failed), skipped as
                         overlap, refused late, interrupted by a newer slot, or out
                         of attempts. A run still ``running`` is counted as live
                         at the end when its runner was still at it, or no
                         instance could have taken it over before the logs end.
``dead_runners_only``    attempt k+1 follows only a runner that was killed, frozen,
                         terminated, cut off by a store/network fault, or whose
                         own lines show a failed or refused call, ``lost`` or a
                         hand-over.
``failed_not_retried``   no attempt is won after a failed finish was accepted.
``max_attempts``         attempts started because runners died (all attempts minus
                         released ones) <= ``max_attempts``.
``skip_no_overlap``      for ``overlap="skip"`` jobs, no claim was won while an
                         earlier slot's lease was surely alive.
``not_late``             no new run (attempt 1) was won by a claim sent more than
                         ``max_late_ms`` (``catch_up_ms`` for catch-up) + 10 s +
                         margin after its slot (wall clock, the host's = SQLite's).
``not_early``            no claim was answered ``early`` (its slot more than 10 s ahead of
                         the store's clock) but while the store's clock was stepped.
``on_time``              each process's first scheduled claim of a slot was sent (true wall
                         clock: a skewed instance's lines are corrected by its skew) from
                         200 ms before to 1 s after the slot, unless its process was
                         frozen, not yet running, or hit by a fault, or the store's clock
                         was stepped within a resync interval (61 s) before.
``takeover_delay``       SIGKILL of a runner with a live attempt -> the next
                         attempt's start, within the takeover bound.
``handover_delay``       SIGTERM of a runner whose attempt was released -> the
                         next attempt's start, within the hand-over bound.
``sink_newest``          a refused sink write has a newer attempt's accepted write;
                         with :attr:`Config.sink`, a slot completed with
                         ``success`` holds the final token in the sink.

What these logs cannot show, counted as *not checked* (``skipped``) rather
than passed:

* a store's clock is not logged: a lease is "alive" only where the calls
  around it prove it; a skip check whose window is ambiguous, or that a step
  of the store's clock touched, is not a violation (nor is a late claim won
  while the clock was stepped);
* an attempt whose claim was won without a ``won`` line (SIGKILL between the
  store's answer and the log write; or a claim that timed out or lost its
  connection although the store carried it out) has no token and no lines:
  the checks it belongs to are skipped;
* a delay that exceeds its bound while a store or network fault, a frozen
  SQLite writer or the lack of any available backup could explain it is
  counted as *excused*, not as a violation;
* whether a ``late`` answer was justified (the store's ``now`` at the claim
  is not known); only won claims are checked;
* the sink's final contents only when :attr:`Config.sink` names the file.

The harness's ``nemesis.jsonl`` lines: ``{"ev": "nemesis", "action": ...,
"runner", "pid", "wall_ns", "mono_ns", ...}``. ``kill``, ``stop``, ``cont``,
``term`` and ``start-instance`` concern one process (``pid``, else the
``runner``'s latest incarnation); a process frozen with no ``cont`` logged
counts as resumed at its first line after the freeze. Every other action is
a store or network fault, of one runner when the line names it, else of all:
``stall`` lasts until an ``unstall`` of the same scope, ``partition`` until
``heal``, ``latency`` until ``unlatency``/``heal`` or a ``latency`` line
whose ``ms`` is 0, ``clock-step`` (the store's clock jumped by ``offset_ms``)
until ``clock-back``; any other action (``reset``, ``store-restart`` stamped at
the crash) lasts its ``duration_ms``, if given. A fault's effects are taken
to last ``lease + 2 x heartbeat`` after it ends.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import sqlite3
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

__all__ = [
    "Config",
    "DEFAULT_JOBS",
    "Delays",
    "INVARIANTS",
    "InvariantResult",
    "JobConfig",
    "Report",
    "check",
    "read_final_runs",
]

Line = Dict[str, Any]
AKey = Tuple[str, int, int, str]  # job, slot_ms, attempt, token
SKey = Tuple[str, int]  # job, slot_ms
NS = 1_000_000
INF = 2**62
LATE_TOLERANCE_MS = 10_000
#: The ``reason`` of a claim sent because its slot came due.
SCHEDULE_REASON = "schedule"
#: How far two clocks of one host (monotonic vs the store's wall clock) may drift apart in one lease.
CLOCK_SLACK_MS = 10
#: The extra allowance of the overlap window beyond heartbeat + rtt + tick.
OVERLAP_EXTRA_MS = 50


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """A job as the worker registers it: its interval and overlap mode."""

    interval_ms: int
    overlap: str


#: The jobs of :mod:`chaoslib.worker`.
DEFAULT_JOBS: Dict[str, JobConfig] = {
    "every1": JobConfig(1_000, "skip"),
    "long2": JobConfig(2_000, "allow"),
    "skip3": JobConfig(3_000, "skip"),
}


@dataclasses.dataclass
class Config:
    """The settings the instances ran with, and the checker's own allowances."""

    lease_ms: int = 2_000
    heartbeat_ms: int = 500
    max_late_ms: int = 30_000
    max_attempts: int = 3
    tick_ms: int = 10
    jobs: Dict[str, JobConfig] = dataclasses.field(default_factory=lambda: dict(DEFAULT_JOBS))
    #: The instances' ``catch_up_ms`` (LeaseCron's default): the lateness allowed to a catch-up claim.
    catch_up_ms: int = 300_000
    #: Scheduling margin added to the takeover, hand-over and local-deadline bounds.
    margin_ms: int = 250
    #: The sink's SQLite file, to check its final contents (optional).
    sink: Optional[Path] = None


#: Every invariant, in report order, with its one-line statement.
INVARIANTS: Dict[str, str] = {
    "tokens_unique": "every won attempt has its own token",
    "attempts_sequential": "attempts of a slot won as 1..n, in order, no gaps",
    "record_last_token": "the stored record holds the last attempt's token",
    "one_finish": "at most one finish accepted per slot, with the final token",
    "fencing": "every older-token heartbeat/finish/release refused",
    "overlap_window": "older attempt's ticks after the newer's first tick <= bound",
    "lost_in_time": "an older attempt that ran on logs lost within the bound",
    "local_deadline": "without a pause, a runner stops by its local deadline",
    "end_state": "each slot ends in exactly one allowed state",
    "dead_runners_only": "attempt k+1 only after attempt k's runner died or was cut off",
    "failed_not_retried": "a raising handler never gets another attempt",
    "max_attempts": "attempts started because runners died <= max_attempts",
    "skip_no_overlap": "overlap=skip: no slot won while an earlier lease was alive",
    "not_late": "no new run won later than max_late_ms + 10 s after its slot",
    "not_early": "no claim answered early (sent > 10 s before its slot by the store's clock)",
    "on_time": "a scheduled claim is sent within its slot's firing window, skewed clocks or not",
    "takeover_delay": "takeover after SIGKILL <= lease + 2 x heartbeat + rtt + margin",
    "handover_delay": "hand-over after SIGTERM <= 2 x heartbeat + rtt + margin",
    "sink_newest": "the sink keeps only the newest attempt's result",
}

#: The end states a slot may reach (``running at end`` is not an end state but is not a violation).
END_STATES = (
    "completed",
    "skipped as overlap",
    "refused late",
    "interrupted by a newer slot",
    "out of attempts",
    "running at end",
    "unreached",
)


@dataclasses.dataclass
class InvariantResult:
    """One invariant: how many cases were checked, skipped (not judgeable), and the violations."""

    name: str
    text: str
    checked: int = 0
    skipped: int = 0
    violations: List[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no case violated the invariant."""
        return not self.violations

    def fail(self, message: str) -> None:
        """Record one violation."""
        self.violations.append(message)


@dataclasses.dataclass
class Delays:
    """Delay samples in ms against a bound; ``excused`` samples exceeded it with a fault to blame."""

    bound_ms: float
    samples: List[float] = dataclasses.field(default_factory=list)
    excused: int = 0

    def percentile(self, p: float) -> Optional[float]:
        """The nearest-rank percentile ``p`` (0–100) of the samples, or None without samples."""
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        rank = max(1, math.ceil(p / 100 * len(ordered)))
        return ordered[rank - 1]

    @property
    def p50(self) -> Optional[float]:
        """The median."""
        return self.percentile(50)

    @property
    def p95(self) -> Optional[float]:
        """The 95th percentile."""
        return self.percentile(95)

    @property
    def p99(self) -> Optional[float]:
        """The 99th percentile."""
        return self.percentile(99)

    @property
    def max(self) -> Optional[float]:
        """The largest sample."""
        return max(self.samples) if self.samples else None

    def summary(self) -> str:
        """``n=… p50=… p95=… p99=… max=… (bound …)`` in ms."""
        if not self.samples:
            return f"n=0 (bound {self.bound_ms:.0f} ms)"
        figures = " ".join(
            f"{k}={v:.0f}" for k, v in (("p50", self.p50), ("p95", self.p95), ("p99", self.p99), ("max", self.max))
        )
        excused = f", {self.excused} excused" if self.excused else ""
        return f"n={len(self.samples)} {figures} ms (bound {self.bound_ms:.0f} ms{excused})"


#: The effects that make a run meaningful: without each of them it proved nothing.
REQUIRED_EFFECTS = ("takeovers", "refused_heartbeats", "refused_late_claims")


@dataclasses.dataclass
class Report:
    """What :func:`check` found."""

    invariants: Dict[str, InvariantResult]
    effects: Dict[str, int]
    end_states: Dict[str, int]
    takeover: Delays
    handover: Delays
    rtt_p99_ms: float
    overlap_bound_ms: float
    margin_ms: int
    notes: List[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no invariant was violated."""
        return all(inv.ok for inv in self.invariants.values())

    @property
    def missing_effects(self) -> List[str]:
        """The required effects the run did not show."""
        return [name for name in REQUIRED_EFFECTS if self.effects.get(name, 0) <= 0]

    @property
    def effective(self) -> bool:
        """True when the run showed takeovers, refused heartbeats and refused late claims."""
        return not self.missing_effects

    @property
    def takeover_delays_ms(self) -> List[float]:
        """The takeover-delay samples (ms)."""
        return self.takeover.samples

    @property
    def handover_delays_ms(self) -> List[float]:
        """The hand-over-delay samples (ms)."""
        return self.handover.samples

    def violations(self) -> List[str]:
        """Every violation as ``"invariant: explanation"``."""
        return [f"{inv.name}: {v}" for inv in self.invariants.values() for v in inv.violations]

    def verdict(self) -> str:
        """One line: OK, the violations, and whether the run proved anything."""
        head = "OK" if self.ok else f"VIOLATIONS ({len(self.violations())})"
        if self.effective:
            return f"{head}; faults were effective"
        return f"{head}; the run proved nothing: no {', no '.join(m.replace('_', ' ') for m in self.missing_effects)}"

    def format_table(self, max_violations: int = 10) -> str:
        """The report as a text table, the violations (at most ``max_violations`` each) and the figures."""
        out = [f"{'invariant':<22} {'checked':>8} {'skipped':>8} {'violations':>10}  statement"]
        for inv in self.invariants.values():
            out.append(f"{inv.name:<22} {inv.checked:>8} {inv.skipped:>8} {len(inv.violations):>10}  {inv.text}")
        for inv in self.invariants.values():
            for v in inv.violations[:max_violations]:
                out.append(f"  ! {inv.name}: {v}")
            if len(inv.violations) > max_violations:
                out.append(f"  ! {inv.name}: … and {len(inv.violations) - max_violations} more")
        out.append("end states: " + ", ".join(f"{k} {v}" for k, v in self.end_states.items()))
        out.append("effects: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.effects.items()))
        out.append(f"takeover delay: {self.takeover.summary()}")
        out.append(f"hand-over delay: {self.handover.summary()}")
        out.append(
            f"round trip p99 {self.rtt_p99_ms:.1f} ms; overlap bound {self.overlap_bound_ms:.0f} ms;"
            f" scheduling margin {self.margin_ms} ms"
        )
        out.extend(f"note: {n}" for n in self.notes)
        out.append(f"verdict: {self.verdict()}")
        return "\n".join(out)


def read_final_runs(store: Any, jobs: Optional[Iterable[str]] = None, limit: int = 1_000_000) -> Dict[str, List[dict]]:
    """``{job: [Run.to_dict(), …]}`` of every stored run, for :func:`check` (``store``: a leasecron Store)."""
    names = list(jobs) if jobs is not None else store.jobs()
    return {name: [run.to_dict() for run in store.runs(name, limit)] for name in names}


# ---------------------------------------------------------------------------------------------
# The model: what the logs say, indexed
# ---------------------------------------------------------------------------------------------


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
    start: Optional[Line] = None
    ticks: List[int] = dataclasses.field(default_factory=list)
    calls: List[Line] = dataclasses.field(default_factory=list)  # heartbeat, finish, release
    handler: List[Line] = dataclasses.field(default_factory=list)  # abort, sink, end
    events: List[Line] = dataclasses.field(default_factory=list)
    end: Optional[Line] = None
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


PROCESS_ACTIONS = {"kill", "stop", "cont", "term", "start-instance"}
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
        self.sink_lines: List[Line] = []
        self.faults: List[Tuple[Optional[str], int, int]] = []  # scope runner (None: all), start, end
        self.clock_steps: List[Tuple[int, int]] = []  # the store's clock was off: from the step to the step back
        self.stores: Set[str] = set()
        self.end_ns = 0
        self.malformed = 0

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

    def faulted(self, a: int, b: int, runner: Optional[str] = None, any_scope: bool = False) -> bool:
        """Whether a store or network fault (of all runners, or of ``runner``) touched ``[a, b]``."""
        settle = self.settle_ns()
        return any(
            (any_scope or scope is None or scope == runner) and s <= b and e + settle >= a
            for scope, s, e in self.faults
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

    def sqlite_writer_frozen(self, a: int, b: int, exclude: Optional[int]) -> bool:
        """On SQLite, whether another process was frozen in ``[a, b]`` (it may hold the write lock)."""
        if not self.stores & {"sqlite", ""}:
            return False
        return any(p.pid != exclude and p.frozen_during(a, b) for p in self.procs.values())


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


def _index(model: Model, line: Line) -> None:
    ev, t = line["ev"], line["mono_ns"]
    model.end_ns = max(model.end_ns, t)
    if ev == "nemesis":
        model.nemesis.append(line)
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
    elif ev in ("heartbeat", "finish", "release"):
        att.calls.append(line)
    else:
        att.handler.append(line)
        if ev == "end":
            att.end = att.end or line
        elif ev == "sink":
            model.sink_lines.append(line)


def _index_event(model: Model, line: Line) -> None:
    kind = line.get("type")
    if kind == "lost":
        model.lost_events.append(line)
    elif kind == "handover":
        model.handover_events.append(line)
    if kind not in ("start", "success", "failed", "lost", "handover"):
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


# ---------------------------------------------------------------------------------------------
# Bounds
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The run's measured round trip and the bounds derived from it (ms)."""

    rtt_p99_ms: float
    overlap_ms: float
    takeover_ms: float
    handover_ms: float
    margin_ms: float
    lease_ms: float


def _bounds(model: Model, config: Config) -> Bounds:
    """The bounds, from the round trips of answered heartbeats that no fault or freeze touched
    (the network's own round trip: a fault's delays are excused where they matter, not
    folded into every bound)."""
    calls = [
        (att, c)
        for att in model.attempts.values()
        for c in att.calls
        if c["ev"] == "heartbeat" and c.get("ok") is not None
    ]
    trips = [
        (c["recv_mono_ns"] - c["sent_mono_ns"]) / NS
        for att, c in calls
        if not model.faulted(c["sent_mono_ns"], c["recv_mono_ns"], att.runner)
        and not _frozen(model, att.pid, c["sent_mono_ns"], c["recv_mono_ns"])
    ] or [(c["recv_mono_ns"] - c["sent_mono_ns"]) / NS for _, c in calls]
    if not trips:
        trips = [(c["t1_mono_ns"] - c["t0_mono_ns"]) / NS for c in model.claims if c.get("outcome") is not None]
    rtt = Delays(0, trips).p99 or 0.0
    hb = config.heartbeat_ms
    return Bounds(
        rtt_p99_ms=rtt,
        overlap_ms=hb + rtt + config.tick_ms + OVERLAP_EXTRA_MS,
        takeover_ms=config.lease_ms + 2 * hb + rtt + config.margin_ms,
        handover_ms=2 * hb + rtt + config.margin_ms,
        margin_ms=config.margin_ms,
        lease_ms=config.lease_ms,
    )


def _frozen(model: Model, pid: Optional[int], a: int, b: int) -> bool:
    proc = model.proc(pid)
    return proc is not None and proc.frozen_during(a, b)


def _ms(ns: float) -> str:
    return f"{ns / NS:.0f} ms"


# ---------------------------------------------------------------------------------------------
# Tokens, attempts, records, finishes, fencing
# ---------------------------------------------------------------------------------------------


def _check_tokens(model: Model, inv: InvariantResult) -> None:
    owners: Dict[str, List[Attempt]] = {}
    for att in model.attempts.values():
        if att.won is not None:
            owners.setdefault(att.token, []).append(att)
    for token, atts in owners.items():
        inv.checked += 1
        if len(atts) > 1:
            inv.fail(f"token {token} won by {len(atts)} attempts: " + ", ".join(a.label() for a in atts))


def _check_attempts(model: Model, slot: Slot, inv: InvariantResult) -> None:
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
    its connection broke) though the store may have carried it out (an ambiguous write)."""
    since = max((a.won_t1 or 0 for a in won if a.attempt < n), default=0)
    until = min((a.won_t0 or INF for a in won if a.attempt > n), default=INF)
    unanswered = [
        c for c in slot.claims if c.get("outcome") is None and c["t0_mono_ns"] >= since and c["t0_mono_ns"] <= until
    ]
    return bool(unanswered or model.nemesis_in({"kill"}, since, until))


def _check_record(model: Model, slot: Slot, inv: InvariantResult) -> None:
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


def _check_one_finish(slot: Slot, inv: InvariantResult) -> None:
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
                f"{slot.label()}: finish of #{c.get('attempt')} ({c.get('runner')}) {c.get('status')} accepted, but {held}"
            )


def _check_fencing(slot: Slot, inv: InvariantResult) -> None:
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


def _check_overlap(model: Model, slot: Slot, b: Bounds, overlap: InvariantResult, lost: InvariantResult) -> None:
    ordered = [a for a in slot.ordered() if a.start_ns is not None]
    bound_ns = b.overlap_ms * NS
    tick_ns = model.config.tick_ms * NS
    for i, older in enumerate(ordered):
        proc = model.proc(older.pid)
        resumes = proc.resume_marks(b.margin_ms * NS) if proc else []
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
                        f"{slot.label()}: {older.label()} ticked {_ms(covered)} after {newer.label()} began"
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
    elif model.faulted(origin, origin + bound_ns, older.runner):  # its refused heartbeat was held up
        inv.skipped += 1
    elif older.lost is None:
        inv.fail(
            f"{older.label()} ran on after {newer.label()} began ({_ms(first - newer_start)} later) and never logged lost"
        )
    elif older.lost["mono_ns"] - origin > bound_ns:
        inv.fail(
            f"{older.label()} logged lost {_ms(older.lost['mono_ns'] - origin)} after the newer start / SIGCONT"
            f" (bound {_ms(bound_ns)})"
        )


def _check_local_deadline(model: Model, att: Attempt, b: Bounds, inv: InvariantResult) -> None:
    renewals = att.renewals()
    if not renewals or att.won_t1 is None or (not att.ticks and att.lost is None):
        return
    inv.checked += 1
    deadline = _LocalDeadline(renewals, att.won_t1, b.lease_ms * NS)
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
            inv.fail(f"{att.label()} ticked {_ms(late_by(t))} past its local deadline without a pause")
            return
    lost = att.lost
    if lost is None or att.refused_before(lost["mono_ns"]) or not late_by(lost["mono_ns"]):
        return
    end = att.end
    if end is not None and end["mono_ns"] < lost["mono_ns"] and not late_by(end["mono_ns"]):
        return  # the handler had ended in time: nothing was left to abort, only the store's record of the end
    inv.fail(f"{att.label()} logged lost {_ms(late_by(lost['mono_ns']))} past its local deadline without a pause")


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


# ---------------------------------------------------------------------------------------------
# End states
# ---------------------------------------------------------------------------------------------


def _end_state(model: Model, slot: Slot, b: Bounds) -> Tuple[Optional[str], Optional[str]]:
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
    outcomes = {c.get("outcome") for c in slot.claims if c.get("reason") != "takeover"}
    reached = outcomes - {None}
    if "won" in reached:
        return None, "a claim was won but the store holds no record"
    if reached == {"overlap"}:
        return "skipped as overlap", None
    if "late" in reached and reached <= {"late", "overlap"}:
        return "refused late", None
    if not reached:
        return "unreached", None
    return None, f"no record, and the claims were answered {sorted(str(o) for o in reached)}"


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
    ceased = _ceased_ns(model, last)
    if ceased is None:
        return None
    interval = model.config.jobs.get(slot.job, JobConfig(0, "allow")).interval_ms
    due = ceased + int((b.takeover_ms + interval) * NS)
    if due >= model.end_ns or not model.available(ceased, due, None if last is None else last.pid):
        return None  # the logs end first, or no instance could have taken it over
    if model.faulted(ceased, due, any_scope=True):
        return None  # a store or network fault may have kept every claim from the store
    who = last.label() if last else f"attempt {rec.get('attempt')}"
    return (
        f"still running: {who} ceased {_ms(model.end_ns - ceased)} before the end;"
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


def _check_successors(model: Model, slot: Slot, dead: InvariantResult, failed: InvariantResult) -> None:
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


def _check_max_attempts(slot: Slot, max_attempts: int, inv: InvariantResult) -> None:
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
            f"{slot.label()}: {max(numbers)} attempts, {released} released: {by_death} started by dead runners > {max_attempts}"
        )


# ---------------------------------------------------------------------------------------------
# Overlap skip and lateness
# ---------------------------------------------------------------------------------------------


Renewal = Tuple[int, int, Attempt]  # received, sent, attempt


def _renewals_of(model: Model, job: str) -> List[Renewal]:
    """Every call that set a lease of ``job`` (won claims, accepted heartbeats), by answer time."""
    out = [(recv, sent, att) for att in model.attempts.values() if att.job == job for sent, recv in att.renewals()]
    return sorted(out, key=lambda r: r[0])


def _check_skip(model: Model, job: str, b: Bounds, inv: InvariantResult) -> None:
    renewals = _renewals_of(model, job)
    recvs = [r[0] for r in renewals]
    for att in model.attempts.values():
        if att.job != job or att.won is None:
            continue
        inv.checked += 1
        lo = bisect.bisect_left(recvs, att.won["t0_mono_ns"] - b.lease_ms * NS)
        hi = bisect.bisect_left(recvs, att.won["t0_mono_ns"])
        found = _live_earlier_lease(model, att, renewals[lo:hi], b.lease_ms * NS)
        if found is None:
            continue
        other, sent = found
        if _ended_sent(model, other) is None and _finish_unlogged(model, other, att.won["t1_mono_ns"]):
            inv.skipped += 1
        elif model.clock_stepped(sent, att.won["t1_mono_ns"]):
            inv.skipped += 1  # the lease was judged on a store clock that had jumped
        else:
            inv.fail(
                f"{att.label()} won while {other.label()}'s lease was alive"
                f" (renewed {_ms(att.won['t0_mono_ns'] - sent)} before the claim, lease {b.lease_ms:.0f} ms)"
            )


def _ended_sent(model: Model, att: Attempt) -> Optional[int]:
    """:meth:`Attempt.ended_sent`, judged with the slot's final record."""
    return att.ended_sent(model.slot(att.job, att.slot_ms).record)


def _live_earlier_lease(
    model: Model, att: Attempt, renewals: List[Renewal], lease_ns: int
) -> Optional[Tuple[Attempt, int]]:
    """An attempt of an earlier slot whose lease surely outlived ``att``'s winning claim, and its renewal."""
    assert att.won is not None
    t1 = att.won["t1_mono_ns"]
    for _recv, sent, other in renewals:
        if other.slot_ms >= att.slot_ms or t1 >= sent + lease_ns - CLOCK_SLACK_MS * NS:
            continue
        ended = _ended_sent(model, other)
        if ended is None or ended > t1:
            return other, sent
    return None


def _finish_unlogged(model: Model, att: Attempt, before: int) -> bool:
    """Whether the attempt's handler ended and its process was killed before ``before``, so a
    finish the store accepted may never have been logged."""
    proc = model.proc(att.pid)
    return att.end is not None and proc is not None and proc.killed_ns is not None and proc.killed_ns < before


def _check_not_late(model: Model, config: Config, inv: InvariantResult) -> None:
    for att in model.attempts.values():
        won = att.won
        if won is None or att.attempt != 1 or not isinstance(won.get("wall_ns"), int):
            continue
        if model.clock_stepped(won["t0_mono_ns"], won["t1_mono_ns"]):
            inv.skipped += 1  # the store judged lateness on a clock that had jumped
            continue
        inv.checked += 1
        allowed = (config.catch_up_ms if won.get("reason") == "catch-up" else config.max_late_ms) + LATE_TOLERANCE_MS
        sent_wall_ms = (won["wall_ns"] - (won["mono_ns"] - won["t0_mono_ns"])) / NS
        late_ms = sent_wall_ms - att.slot_ms
        if late_ms > allowed + config.margin_ms:
            inv.fail(
                f"{att.label()} won by a {won.get('reason')} claim sent {late_ms:.0f} ms after its slot (allowed {allowed} ms)"
            )


#: How early a scheduled claim may be sent, by the true wall clock (the instance's estimate of the
#: store's clock is off by up to half a sync's round trip, and drifts until the next sync).
EARLY_SLACK_MS = 200
#: How late a scheduled claim may be sent after its slot when nothing held its process back.
FIRE_WINDOW_MS = 1_000
#: How long after a store clock step an instance may still fire by the old offset (its resync interval).
RESYNC_NS = 61_000 * NS


def _check_timing(model: Model, config: Config, not_early: InvariantResult, on_time: InvariantResult) -> None:
    """Instances fire on the store's clock, however skewed their own: no ``early`` answers, and
    each process's first scheduled claim of a slot sent within ``[slot - EARLY_SLACK_MS, slot +
    FIRE_WINDOW_MS]`` of the true time, unless its process was frozen, starting or hit by a fault."""
    first: Dict[Tuple[int, str, int], Line] = {}
    for claim in model.claims:
        t0 = claim.get("t0_mono_ns", claim["mono_ns"])
        if claim.get("outcome") is not None:
            not_early.checked += 1
            if claim.get("outcome") == "early":
                if model.clock_stepped(t0, claim.get("t1_mono_ns", t0)):
                    not_early.skipped += 1
                else:
                    not_early.fail(
                        f"{claim.get('job')}@{claim.get('slot_ms')}: claim of {claim.get('runner')} answered early"
                    )
        if claim.get("reason") == SCHEDULE_REASON and isinstance(claim.get("wall_ns"), int):
            key = (claim["pid"], claim["job"], claim["slot_ms"])
            if key not in first or t0 < first[key].get("t0_mono_ns", first[key]["mono_ns"]):
                first[key] = claim
    for (pid, job, slot_ms), claim in first.items():
        t0 = claim.get("t0_mono_ns", claim["mono_ns"])
        sent_wall_ms = (claim["wall_ns"] - (claim["mono_ns"] - t0)) / NS
        lag_ms = sent_wall_ms - slot_ms
        slot_mono = t0 - int(lag_ms * NS)  # the slot's time on the monotonic clock
        proc = model.proc(pid)
        since = slot_mono - FIRE_WINDOW_MS * NS
        held = (
            proc is None
            or proc.running_ns is None
            or proc.running_ns > since
            or proc.frozen_during(since, t0)
            or model.faulted(since, t0, claim.get("runner"))
            or model.clock_stepped(since, t0, RESYNC_NS)
        )
        if -EARLY_SLACK_MS <= lag_ms <= FIRE_WINDOW_MS:
            on_time.checked += 1
        elif held:
            on_time.skipped += 1
        else:
            on_time.checked += 1
            on_time.fail(
                f"{job}@{slot_ms}: {claim.get('runner')} (pid {pid}) sent its scheduled claim"
                f" {lag_ms:+.0f} ms from the slot (window {-EARLY_SLACK_MS}..+{FIRE_WINDOW_MS} ms)"
            )


# ---------------------------------------------------------------------------------------------
# Takeover and hand-over delays
# ---------------------------------------------------------------------------------------------


def _live_at(model: Model, pid: Optional[int], t: int) -> List[Attempt]:
    """The attempts process ``pid`` was running at ``t``: started, not ended, not lost."""
    out = []
    for att in model.attempts.values():
        if att.pid != pid or att.start is None or att.start["mono_ns"] > t:
            continue
        done = [x["mono_ns"] for x in (att.end, att.lost) if x is not None]
        done += [c["sent_mono_ns"] for c in att.calls if c["ev"] in ("finish", "release")]
        if not done or min(done) > t:
            out.append(att)
    return out


def _next_start(model: Model, att: Attempt, after: int) -> Optional[Attempt]:
    slot = model.slots[(att.job, att.slot_ms)]
    later = [
        a for a in slot.ordered() if a.attempt > att.attempt and a.start is not None and a.start["mono_ns"] > after
    ]
    return later[0] if later else None


def _excused(model: Model, victim: Optional[int], a: int, b: int, bound_ns: int) -> bool:
    return (
        model.faulted(a, b, any_scope=True)
        or model.sqlite_writer_frozen(a, b, victim)
        or not model.available(a, min(b, a + bound_ns), victim)
    )


def _check_delays(model: Model, action: str, delays: Delays, inv: InvariantResult) -> None:
    bound_ns = int(delays.bound_ms * NS)
    for n in model.nemesis:
        if n.get("action") != action:
            continue
        t, pid = n["mono_ns"], n.get("pid")
        proc = model.proc(pid)
        if proc is not None and proc.frozen_at(t):
            continue  # a frozen runner's lease was already running out: not a kill-takeover
        for att in _live_at(model, pid, t):
            if action == "term" and not att.accepted("release"):
                continue
            nxt = _next_start(model, att, t)
            if nxt is None or nxt.start is None:
                continue
            delay = nxt.start["mono_ns"] - t
            delays.samples.append(delay / NS)
            inv.checked += 1
            if delay > bound_ns:
                if _excused(model, pid, t, nxt.start["mono_ns"], bound_ns):
                    delays.excused += 1
                else:
                    inv.fail(
                        f"{att.label()}: {action} -> {nxt.label()} began after {_ms(delay)} (bound {delays.bound_ms:.0f} ms)"
                    )


# ---------------------------------------------------------------------------------------------
# Sink
# ---------------------------------------------------------------------------------------------


def _check_sink(model: Model, config: Config, inv: InvariantResult) -> None:
    accepted: Dict[SKey, List[int]] = {}
    for line in model.sink_lines:
        if line.get("accepted") is True:
            accepted.setdefault((line["job"], line["slot_ms"]), []).append(line["attempt"])
    for line in model.sink_lines:
        if line.get("accepted") is not False:
            continue
        inv.checked += 1
        newer = [n for n in accepted.get((line["job"], line["slot_ms"]), []) if n > line["attempt"]]
        first_claim = min((c["mono_ns"] for c in model.slot(line["job"], line["slot_ms"]).claims), default=0)
        if not newer and model.nemesis_in({"kill"}, first_claim, line["mono_ns"]):
            inv.skipped += 1
        elif not newer:
            inv.fail(
                f"{line['job']}@{line['slot_ms']} #{line['attempt']} ({line.get('runner')}):"
                " sink refused the write, no newer attempt wrote"
            )
    rows = _sink_rows(config.sink)
    if rows is None:
        return
    failed_writes = {
        (line["job"], line["slot_ms"], line["attempt"]) for line in model.sink_lines if line.get("accepted") is None
    }
    for slot in model.slots.values():
        rec = slot.record
        if rec is None or rec.get("status") != "success":
            continue
        if (slot.job, slot.slot_ms, rec.get("attempt")) in failed_writes:
            inv.skipped += 1  # the final attempt's write failed (logged with its error): nothing to hold
            continue
        inv.checked += 1
        row = rows.get((slot.job, slot.slot_ms))
        if row is None or row[1] != rec.get("token"):
            held = "nothing" if row is None else f"attempt {row[0]} token {row[1]}"
            inv.fail(
                f"{slot.label()}: completed by #{rec.get('attempt')} token {rec.get('token')}, the sink holds {held}"
            )


def _sink_rows(path: Optional[Path]) -> Optional[Dict[SKey, Tuple[int, str]]]:
    if path is None or not Path(path).exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            (job, slot): (attempt, token)
            for job, slot, attempt, token in conn.execute("SELECT job, slot_ms, attempt, token FROM results")
        }
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------
# Effects and the entry point
# ---------------------------------------------------------------------------------------------


def _effects(model: Model) -> Dict[str, int]:
    calls = [c for att in model.attempts.values() for c in att.calls]
    actions = [n.get("action") for n in model.nemesis]
    return {
        "takeovers": sum(1 for c in model.claims if c.get("outcome") == "won" and c.get("reason") == "takeover"),
        "refused_heartbeats": sum(1 for c in calls if c["ev"] == "heartbeat" and c.get("ok") is False),
        "refused_late_claims": sum(1 for c in model.claims if c.get("outcome") == "late"),
        "failed_heartbeats": sum(1 for c in calls if c["ev"] == "heartbeat" and c.get("ok") is None),
        "refused_finishes": sum(1 for c in calls if c["ev"] == "finish" and c.get("ok") is False),
        "lost_events": len(model.lost_events),
        "handovers": len(model.handover_events),
        "overlaps_skipped": sum(1 for c in model.claims if c.get("outcome") == "overlap"),
        "planned_failures": sum(
            1 for a in model.attempts.values() if a.end is not None and a.end.get("outcome") == "raised"
        ),
        "kills": actions.count("kill"),
        "stops": actions.count("stop"),
        "terms": actions.count("term"),
        "store_restarts": actions.count("store-restart"),
        "stalls": actions.count("stall"),
    }


def check(log_dir: Path, final_runs: Dict[str, List[dict]], config: Config) -> Report:
    """Verify the invariants of one chaos run; see the module docstring for each of them."""
    model = build_model(Path(log_dir), final_runs, config)
    b = _bounds(model, config)
    inv = {name: InvariantResult(name, text) for name, text in INVARIANTS.items()}
    takeover, handover = Delays(b.takeover_ms), Delays(b.handover_ms)
    end_states = {state: 0 for state in END_STATES}
    _check_tokens(model, inv["tokens_unique"])
    for slot in sorted(model.slots.values(), key=lambda s: (s.job, s.slot_ms)):
        _check_attempts(model, slot, inv["attempts_sequential"])
        _check_record(model, slot, inv["record_last_token"])
        _check_one_finish(slot, inv["one_finish"])
        _check_fencing(slot, inv["fencing"])
        _check_overlap(model, slot, b, inv["overlap_window"], inv["lost_in_time"])
        _check_successors(model, slot, inv["dead_runners_only"], inv["failed_not_retried"])
        _check_max_attempts(slot, config.max_attempts, inv["max_attempts"])
        state, why = _end_state(model, slot, b)
        inv["end_state"].checked += 1
        if state is not None:
            end_states[state] += 1
        else:
            inv["end_state"].fail(f"{slot.label()}: {why}")
    for att in model.attempts.values():
        _check_local_deadline(model, att, b, inv["local_deadline"])
    for job, jc in config.jobs.items():
        if jc.overlap == "skip":
            _check_skip(model, job, b, inv["skip_no_overlap"])
    _check_not_late(model, config, inv["not_late"])
    _check_timing(model, config, inv["not_early"], inv["on_time"])
    _check_delays(model, "kill", takeover, inv["takeover_delay"])
    _check_delays(model, "term", handover, inv["handover_delay"])
    _check_sink(model, config, inv["sink_newest"])
    return Report(
        invariants=inv,
        effects=_effects(model),
        end_states=end_states,
        takeover=takeover,
        handover=handover,
        rtt_p99_ms=b.rtt_p99_ms,
        overlap_bound_ms=b.overlap_ms,
        margin_ms=config.margin_ms,
        notes=_notes(model, config),
    )


def _notes(model: Model, config: Config) -> List[str]:
    notes = []
    if model.malformed:
        notes.append(f"{model.malformed} malformed log line(s) ignored")
    if config.sink is None:
        notes.append("sink contents not checked (Config.sink not given)")
    if not model.procs:
        notes.append("no instance lines found")
    return notes
