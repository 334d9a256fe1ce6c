"""The checker's vocabulary: settings, invariants, results and the report."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from leasecron.options import default_margin_ms

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
    """A job as the worker registers it: its interval, overlap mode, ``timeout_ms`` (None: no
    limit), ``retries`` and ``retry_delay_ms``."""

    interval_ms: int
    overlap: str
    timeout_ms: Optional[int] = None
    retries: int = 0
    retry_delay_ms: int = 1_000


#: The jobs of :mod:`chaoslib.worker` (what their handlers do: :mod:`chaoslib.handlers`).
DEFAULT_JOBS: Dict[str, JobConfig] = {
    "every1": JobConfig(1_000, "skip"),
    "long2": JobConfig(2_000, "allow"),
    "skip3": JobConfig(3_000, "skip"),
    "timeout2": JobConfig(2_000, "allow", timeout_ms=1_000),
    "retry2": JobConfig(2_000, "skip", retries=2, retry_delay_ms=100),
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
    #: How often the instances looked for requests of manual runs (``LeaseCron(poll_ms=...)``).
    poll_ms: int = 1_000
    #: The instances' ``lease_margin_ms`` (None: LeaseCron's default for the lease and heartbeat).
    lease_margin_ms: Optional[int] = None

    @property
    def margin_of_lease_ms(self) -> int:
        """The ``lease_margin_ms`` the instances ran with: given, or LeaseCron's default."""
        if self.lease_margin_ms is not None:
            return self.lease_margin_ms
        return default_margin_ms(self.lease_ms, self.heartbeat_ms)


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
    "margin_kept": "an unrenewed lost >= lease_margin_ms - tolerance before the next attempt began",
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
    "paused_no_new_run": "no scheduled or catch-up run won while its job was surely paused",
    "trigger_once": "each trigger ran at most once, and once when an instance was up to claim it",
    "attempts_match": "each run's stored attempts match who logged winning, finishing, releasing them",
    "timeout_enforced": "a run past timeout_ms is aborted on time, renewed till it returns, recorded timed out",
    "tries_sequential": "an attempt's tries run one at a time as 1..k, k <= retries + 1, after the delays",
    "retry_outcome": "a run recorded success ended by a try that returned; failed, by its last try raising",
    "rescheduled_fenced": "no new run from a replaced schedule's version starts after the change (store clock)",
    "stored_once": "a stored job's slot due while it existed and an instance was up runs; none of a deleted one",
}

#: The end states a slot may reach (``running at end`` is not an end state but is not a violation).
END_STATES = (
    "completed",
    "skipped as overlap",
    "refused late",
    "skipped while paused",
    "skipped as rescheduled",
    "interrupted by a newer slot",
    "out of attempts",
    "unconfirmed, lost in a failover",
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
REQUIRED_EFFECTS = (
    "takeovers", "refused_heartbeats", "refused_late_claims", "paused_claims", "manual_runs", "timeouts",
    "timeouts_ignored", "retried_tries", "stale_claims", "stored_job_runs",
)  # fmt: skip


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
    #: After each ``kill -9`` of a replicated store's primary: ms until each figure of
    #: :data:`~chaoslib.checker.timing.FAILOVER_FIGURES` (empty on other stores).
    failover_ms: Dict[str, List[float]] = dataclasses.field(default_factory=dict)
    #: The gaps (ms) from a runner's ``lost`` (unrenewed) to the next attempt's start (``margin_kept``).
    margin_gaps_ms: List[float] = dataclasses.field(default_factory=list)
    #: The ``lease_margin_ms`` they are judged by, and the tolerance below it.
    lease_margin_ms: int = 0
    margin_tolerance_ms: int = 0

    @property
    def smallest_margin_gap_ms(self) -> Optional[float]:
        """The smallest gap from a ``lost`` (unrenewed) to the next attempt's start, or None."""
        return min(self.margin_gaps_ms) if self.margin_gaps_ms else None

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
        """True when the run showed takeovers, refused heartbeats, refused late claims, claims
        answered ``paused``, won manual runs, timeouts (some ignored for a while), retried tries,
        claims answered ``stale`` and runs of stored jobs."""
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
        if any(self.failover_ms.values()):
            figures = ", ".join(f"{name.replace('_', ' ')} {Delays(0, ms).summary().split(' (bound')[0]}"
                                for name, ms in self.failover_ms.items())  # fmt: skip
            out.append(f"after a primary kill: {figures}")
        smallest = self.smallest_margin_gap_ms
        out.append(
            f"lost (unrenewed) -> next attempt: n={len(self.margin_gaps_ms)}"
            + ("" if smallest is None else f" smallest {smallest:.0f} ms")
            + f" (lease_margin_ms {self.lease_margin_ms} ms, tolerance {self.margin_tolerance_ms} ms)"
        )
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
