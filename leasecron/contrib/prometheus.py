"""Prometheus metrics of leasecron instances (``pip install 'leasecron[prometheus]'``).

:func:`instrument`, called before :meth:`~leasecron.LeaseCron.start`, hooks the :class:`Metrics`
of a registry and namespace (one, shared by every instance instrumented into it) into an
instance: its events count the ends of runs, the leases lost, the manual runs, the retries and
the time-outs; its store is wrapped in a :class:`~leasecron.stores.DelegatingStore` that counts
and times the claims; a collector reads the gauges at each scrape: the live runs from every
instrumented instance, and each job's pause, last success, last finish, next slot and overdue
from their stores (:mod:`leasecron.watching`). Every series is per job: no slot, token or
runner label. :doc:`Operating it, Prometheus metrics <operating>` lists the metrics, what each
counts and how the takeover delay is measured; :doc:`watching` the alerts built on them.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - tested in a process without prometheus_client
    raise ImportError(
        "leasecron.contrib.prometheus needs the Python package 'prometheus_client', which is not installed:"
        " pip install 'leasecron[prometheus]'"
    ) from exc

from ..errors import ConfigError
from ..events import Event, log
from ..jobs import Job
from ..runs import Claim, Run, RunBrief
from ..states import AbortReason, LostCause, Outcome, Reason
from ..stores import ClaimRequest, DelegatingStore, Store
from ..watching import JobWatch, read_watches

if TYPE_CHECKING:  # pragma: no cover
    from ..cron import LeaseCron

__all__ = ["Metrics", "instrument", "CLAIM_BUCKETS", "TAKEOVER_BUCKETS", "RUN_OUTCOMES", "LOST_CAUSES"]

#: Buckets of ``claim_seconds``, in seconds: a claim takes well under a millisecond (memory) to tens of ms.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Buckets of ``takeover_delay_seconds``: within two heartbeats (5 s each by default) when all is well.
TAKEOVER_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
#: The ``outcome`` values of ``runs_total``: the events that end an attempt.
RUN_OUTCOMES = ("success", "failed", "lost", "handover")
#: The ``cause`` values of ``lease_lost_total``.
LOST_CAUSES = LostCause.values()
_OUTCOMES = Outcome.values()
#: How many runs' last seen lease ends a store wrapper remembers (the oldest are forgotten).
_SEEN_MAX = 4096

_CACHE_LOCK = threading.RLock()  # held while a Metrics is made, which registers itself
_CACHE: "weakref.WeakKeyDictionary[CollectorRegistry, Dict[str, Metrics]]" = weakref.WeakKeyDictionary()


def instrument(
    cron: "LeaseCron", registry: Optional[CollectorRegistry] = None, namespace: str = "leasecron"
) -> "Metrics":
    """Count and time what ``cron`` does, in ``registry`` (default: prometheus_client's).

    Call it before ``cron.start()``. Every instance instrumented into one
    registry and namespace shares one :class:`Metrics` (returned), so each
    metric is registered once; the series are per job. Raises
    :class:`~leasecron.ConfigError` when ``cron`` is running or already
    instrumented into these metrics.
    """
    registry = REGISTRY if registry is None else registry
    with _CACHE_LOCK:
        metrics = _CACHE.get(registry, {}).get(namespace)
        if metrics is None:
            metrics = Metrics(registry, namespace)
    metrics.instrument(cron)
    return metrics


class Metrics:
    """The leasecron metrics of one registry and namespace; :meth:`instrument` adds an instance.

    The collectors are public attributes (``runs``, ``claims``,
    ``claim_seconds``, ``lease_lost``, ``takeover_delay``, ``manual_runs``, ``retries``, ``timeouts``)
    for tests and custom dashboards. Creating a second ``Metrics`` for the same registry
    and namespace fails as prometheus_client does (duplicated timeseries):
    use :func:`instrument`, which reuses the first.
    """

    def __init__(
        self,
        registry: Optional[CollectorRegistry] = None,
        namespace: str = "leasecron",
        *,
        claim_buckets: Sequence[float] = CLAIM_BUCKETS,
        takeover_buckets: Sequence[float] = TAKEOVER_BUCKETS,
    ) -> None:
        registry = REGISTRY if registry is None else registry
        # no reference to the registry is kept: the cache below holds it weakly, by key
        self.namespace = namespace
        self.runs = Counter(
            "runs", "Attempts this instance ran that ended, by outcome.", ["job", "outcome"],
            namespace=namespace, registry=registry,
        )  # fmt: skip
        self.claims = Counter(
            "claims", "Claims this instance sent, by reason and the store's answer (error: the call raised).",
            ["job", "reason", "outcome"], namespace=namespace, registry=registry,
        )  # fmt: skip
        self.claim_seconds = Histogram(
            "claim_seconds", "Time of a claim call answered by the store (host's monotonic clock).", ["job"],
            namespace=namespace, registry=registry, buckets=tuple(claim_buckets),
        )  # fmt: skip
        self.lease_lost = Counter(
            "lease_lost", "Leases this instance lost: fenced (refused by the store) or unrenewed (for lease_ms).",
            ["job", "cause"], namespace=namespace, registry=registry,
        )  # fmt: skip
        self.takeover_delay = Histogram(
            "takeover_delay_seconds",
            "Takeovers won here of a run whose lease ran out: the new attempt's start minus the previous"
            " attempt's lease end as last seen here (store clock).",
            ["job"], namespace=namespace, registry=registry, buckets=tuple(takeover_buckets),
        )  # fmt: skip
        self.manual_runs = Counter(
            "manual_runs", "Manual runs (trigger) this instance started.", ["job"],
            namespace=namespace, registry=registry,
        )  # fmt: skip
        self.retries = Counter(
            "retries", "Failed tries of a handler that another try followed (retries).", ["job"],
            namespace=namespace, registry=registry,
        )  # fmt: skip
        self.timeouts = Counter(
            "timeouts", "Attempts that ran for their timeout_ms (then recorded failed).", ["job"],
            namespace=namespace, registry=registry,
        )  # fmt: skip
        self._gauges = _Gauges(namespace)
        registry.register(self._gauges)
        self._lock = threading.Lock()
        self._jobs: Set[str] = set()
        self._instrumented: "weakref.WeakSet[LeaseCron]" = weakref.WeakSet()
        with _CACHE_LOCK:
            _CACHE.setdefault(registry, {}).setdefault(namespace, self)

    def instrument(self, cron: "LeaseCron") -> None:
        """Hook these metrics into ``cron`` (before its ``start()``): its events, its store, its live runs."""
        with self._lock:
            if cron.running:
                raise ConfigError(
                    f"instrument() must be called before cron.start(): {cron!r} is running (the engine already"
                    " holds its store)"
                )
            if cron in self._instrumented:
                raise ConfigError(f"{cron!r} is already instrumented into these metrics")
            self._instrumented.add(cron)
        for name in cron.jobs:
            self.known(name)
        for name in RUN_OUTCOMES:
            cron.on(name, self._on_end)
        cron.on("lost", self._on_lost)
        cron.on("start", self._on_start)
        cron.on("retry", self._on_retry)
        cron.store = _MeteredStore(cron.store, self)
        self._gauges.add(cron)

    def known(self, job: str) -> None:
        """Create the series of ``job`` at zero (done for every job seen), so a rate starts from 0."""
        if job in self._jobs:
            return
        with self._lock:
            if job in self._jobs:
                return
            self._jobs.add(job)
        for outcome in RUN_OUTCOMES:
            self.runs.labels(job, outcome)
        for cause in LOST_CAUSES:
            self.lease_lost.labels(job, cause)
        self.claim_seconds.labels(job)
        self.takeover_delay.labels(job)
        self.manual_runs.labels(job)
        self.retries.labels(job)
        self.timeouts.labels(job)

    # -- from the events ---------------------------------------------------------------

    def _on_end(self, event: Event) -> None:
        if event.job is not None:
            self.runs.labels(event.job, event.type).inc()
            if event.type == "failed" and event.reason == AbortReason.TIMEOUT:
                self.timeouts.labels(event.job).inc()

    def _on_retry(self, event: Event) -> None:
        if event.job is not None:
            self.retries.labels(event.job).inc()

    def _on_lost(self, event: Event) -> None:
        if event.job is not None:
            self.lease_lost.labels(event.job, event.reason or LostCause.UNRENEWED).inc()

    def _on_start(self, event: Event) -> None:
        if event.job is not None and event.reason == Reason.MANUAL:
            self.manual_runs.labels(event.job).inc()

    # -- from the store wrapper ----------------------------------------------------------

    def claimed(self, job: str, reason: str, outcome: str, seconds: Optional[float]) -> None:
        """Count a claim (``outcome`` ``error`` when it raised) and time it when it was answered."""
        self.known(job)
        self.claims.labels(job, reason, outcome).inc()
        if seconds is not None:
            self.claim_seconds.labels(job).observe(seconds)


class _Gauges(Collector):
    """The gauges read at each scrape: live runs (from the instrumented instances), and each known
    job's pause, last success, last finish by status, next slot and overdue (from their stores)."""

    def __init__(self, namespace: str) -> None:
        self._prefix = f"{namespace}_" if namespace else ""
        self._crons: "weakref.WeakSet[LeaseCron]" = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, cron: "LeaseCron") -> None:
        with self._lock:
            self._crons.add(cron)

    def _families(self) -> Dict[str, GaugeMetricFamily]:
        p = self._prefix
        return {
            "live": GaugeMetricFamily(f"{p}live_runs", "Handlers executing on this instance now.", labels=["job"]),
            "paused": GaugeMetricFamily(
                f"{p}job_paused", "1 while the job is paused in the store, else 0.", labels=["job"]
            ),
            "success": GaugeMetricFamily(
                f"{p}job_last_success_timestamp_seconds", "When the job's newest successful run ended (store clock).",
                labels=["job"],
            ),  # fmt: skip
            "finish": GaugeMetricFamily(
                f"{p}job_last_finish_timestamp_seconds",
                "When the job's newest run that ended with this status ended (store clock).", labels=["job", "status"],
            ),  # fmt: skip
            "next": GaugeMetricFamily(
                f"{p}job_next_slot_timestamp_seconds", "The job's next slot (also while it is paused).", labels=["job"]
            ),
            "overdue": GaugeMetricFamily(
                f"{p}job_overdue",
                "1 when a slot of the job due more than max_late_ms + 10 s ago, after its newest stored run, has no"
                " run (the job has a stored run and is not paused), else 0.", labels=["job"],
            ),  # fmt: skip
        }

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self._families().values())

    def collect(self) -> Iterable[GaugeMetricFamily]:
        with self._lock:
            crons = list(self._crons)
        counts: Dict[str, int] = {}
        for cron in crons:
            for name in cron.jobs:
                counts.setdefault(name, 0)
            for run in cron.live_runs():
                counts[run.job] = counts.get(run.job, 0) + 1
        families = self._families()
        for job, count in sorted(counts.items()):
            families["live"].add_metric([job], count)
        for job, seen in sorted(_watches(crons).items()):
            families["paused"].add_metric([job], int(seen.paused))
            if seen.last_success_ms is not None:
                families["success"].add_metric([job], seen.last_success_ms / 1000)
            for status, ms in seen.last_finish_ms.items():
                families["finish"].add_metric([job, status], ms / 1000)
            if seen.next_slot_ms is not None:
                families["next"].add_metric([job], seen.next_slot_ms / 1000)
            families["overdue"].add_metric([job], int(seen.overdue))
        return list(families.values())


def _watches(crons: List["LeaseCron"]) -> Dict[str, JobWatch]:
    """Each job the instrumented instances know (registered there, or stored in their store), as
    :func:`~leasecron.watching.read_watches` reads it: one call per store and scrape
    (:meth:`~leasecron.Store.overview`, whatever the number of jobs), shared by the instances of
    that store. The jobs of a store that fails it are left out of that scrape, logged."""
    by_store: Dict[int, Tuple[Store, str, Dict[str, Job], Optional[Dict[str, Any]]]] = {}
    for cron in crons:
        store = cron.store
        if isinstance(store, _MeteredStore):  # instances that share a store each have a wrapper of it
            store = store.inner
        _, _, registered, _ = by_store.setdefault(id(store), (store, cron.runner, {}, dict(cron._defaults)))
        for name, job in cron.jobs.items():
            registered.setdefault(name, job)
    watches: Dict[str, JobWatch] = {}
    for store, runner, registered, defaults in by_store.values():
        try:
            read = read_watches(store, registered, defaults)
        except Exception as exc:  # noqa: BLE001 - a scrape goes on without these jobs
            log.warning("leasecron: cannot read the jobs for the metrics, runner %r: %s", runner, exc)
            continue
        for name, seen in read.jobs.items():
            watches.setdefault(name, seen)
    return watches


class _MeteredStore(DelegatingStore):
    """The instance's store, with every claim counted and timed, and the lease ends it answers remembered."""

    def __init__(self, inner: Store, metrics: Metrics) -> None:
        super().__init__(inner)
        self._metrics = metrics
        self._lock = threading.Lock()
        #: (job, slot_ms) -> the run as last seen running (for the takeover delay)
        self._seen: "collections.OrderedDict[Tuple[str, int], Union[Run, RunBrief]]" = collections.OrderedDict()

    def _claim(self, request: ClaimRequest) -> Claim:
        """The inner store's claim, counted by reason and outcome and timed."""
        claim = super()._claim
        return self._counted([request], lambda: [claim(request)])[0]

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """The inner store's batch of claims: each claim counted, and timed as the whole batch took
        (its claims were decided in the one call)."""
        return self._counted(requests, functools.partial(super()._claim_many, requests))

    def _counted(self, requests: List[ClaimRequest], call: Callable[[], List[Claim]]) -> List[Claim]:
        """The answers of ``call`` (the inner claim, or batch of claims), each claim counted and timed."""
        began = time.perf_counter()
        try:
            claims = call()
        except Exception:
            for request in requests:
                self._metrics.claimed(request.job, request.reason, "error", None)
            raise
        took = time.perf_counter() - began
        for request, claim in zip(requests, claims):
            outcome = claim.outcome if claim.outcome in _OUTCOMES else "other"
            self._metrics.claimed(request.job, request.reason, outcome, took)
            self._note(request.job, request.slot_ms, request.reason, claim)
        return claims

    def __repr__(self) -> str:
        return f"<{self.inner!r} with Prometheus metrics>"

    def _unfinished(self, job: str) -> List[Run]:
        """The inner store's running runs of ``job``; their lease ends are remembered."""
        runs = super()._unfinished(job)
        with self._lock:
            for run in runs:
                self._remember(run)
        return runs

    def _note(self, job: str, slot_ms: int, reason: str, claim: Claim) -> None:
        run = claim.found
        delay_ms: Optional[int] = None
        with self._lock:
            if claim.outcome in (Outcome.RUNNING, Outcome.OVERLAP) and run is not None:
                self._remember(run)  # for overlap, the earlier run, which is watched too
            elif claim.outcome in (Outcome.WON, Outcome.DONE, Outcome.NONE):
                previous = self._seen.pop((job, slot_ms), None)
                if claim.outcome == Outcome.WON and reason == Reason.TAKEOVER and claim.run is not None:
                    delay_ms = _takeover_delay_ms(previous, claim.run)
        if delay_ms is not None:
            self._metrics.takeover_delay.labels(job).observe(delay_ms / 1000)

    def _remember(self, run: Union[Run, RunBrief]) -> None:
        key = (run.job, run.slot_ms)
        self._seen[key] = run
        self._seen.move_to_end(key)
        while len(self._seen) > _SEEN_MAX:
            self._seen.popitem(last=False)


def _takeover_delay_ms(previous: Union[Run, RunBrief, None], won: Run) -> Optional[int]:
    """``won.started_ms`` minus the previous attempt's lease end as last seen, or None when not measurable."""
    if previous is None or previous.attempt != won.attempt - 1:
        return None  # never saw the attempt that was replaced
    if won.handed_over and not previous.handed_over:
        return None  # released after the last look: the lease ended at the release
    delay = won.started_ms - previous.lease_end_ms
    return delay if delay >= 0 else None  # negative: the lease was ended early (released), not run out
