"""What the dashboard shows, read from the store in a fixed number of calls per page.

The jobs page must stay fast with 10,000 jobs of 100 runs each, so it never asks the store once
per job: a page of jobs is six calls (``now_ms``, ``jobs``, ``job_states``,
``schedule_changes(0)`` for every stored schedule, ``instances`` for the live instances'
announcements, and ``recent_runs`` for the jobs *on the page*, filtered and cut into pages
first), a job's page five (``now_ms``, ``job_state``, ``stored_schedule``, ``instances``,
``runs``), a run's two (``now_ms``, ``get_run``), the instances page two (``now_ms``,
``instances``). The names are the union that ``leasecron jobs`` shows: jobs with runs, paused or
with requests, with a stored schedule, registered in code by a live instance, and the jobs of
the application's :class:`~leasecron.LeaseCron` when one is given. A job's schedule is the one
its instances run, decided by :func:`leasecron.jobs.shown_schedule` as for ``leasecron jobs``: a
stored override or stored job, else the code's (the app's, or the one the live instances
announce, the most used). Everything here is plain data: :mod:`.views` renders it as HTML,
:mod:`.api` as JSON.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ...announcements import InUse, schedules_in_use
from ...controls import JobState, ManualRequest
from ...cron import LeaseCron
from ...errors import ConfigError
from ...formatting import format_schedule
from ...jobs import expired_request, shown_schedule
from ...runs import Attempt, Run
from ...schedules import make_schedule
from ...states import AttemptOutcome, ScheduleSource, Status
from ...stored import StoredSchedule, schedule_spec
from ...stores import Store
from .settings import DashboardError

__all__ = [
    "DEFAULT_PER_PAGE",
    "DEFAULT_RUNS",
    "HANDED_OVER",
    "MARKS",
    "MAX_PAGE",
    "MAX_PER_PAGE",
    "MAX_RUNS",
    "Bar",
    "announced_text",
    "JobView",
    "JobsPage",
    "bars",
    "job_dict",
    "live_dict",
    "live_runs",
    "mark_status",
    "number_arg",
    "paging",
    "read_job",
    "read_jobs_page",
    "status_arg",
]

#: How many of a job's newest runs the jobs page shows as marks.
MARKS = 30
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500
#: The largest page number taken (far beyond any store; it keeps the arithmetic small).
MAX_PAGE = 10**9
#: How many runs a job's page (and ``/api/jobs/<job>/runs``) shows unless ``?limit=`` says otherwise.
DEFAULT_RUNS = 100
MAX_RUNS = 1000
#: The mark of a run whose latest attempt was released by a stopping instance, not yet taken over.
HANDED_OVER = "handed-over"


def number_arg(args: Mapping[str, str], name: str, default: int, maximum: int) -> int:
    """The whole number of query argument ``name`` (``default`` when absent), from 1 to ``maximum``;
    anything else is a :class:`DashboardError` (400) naming the argument."""
    text = args.get(name)
    if text is None or text == "":
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 18) or not 1 <= int(text) <= maximum:
        raise DashboardError(400, f"?{name}= must be a whole number from 1 to {maximum}, not {text[:40]!r}")
    return int(text)


def paging(args: Mapping[str, str]) -> Tuple[int, int]:
    """The ``?page=`` (from 1) and ``?per_page=`` (at most :data:`MAX_PER_PAGE`) of a jobs list."""
    return number_arg(args, "page", 1, MAX_PAGE), number_arg(args, "per_page", DEFAULT_PER_PAGE, MAX_PER_PAGE)


def status_arg(args: Mapping[str, str]) -> Optional[str]:
    """The ``?status=`` filter: a run status, or None for every run; anything else is a 400."""
    status = args.get("status") or None
    if status is not None and status not in Status.values():
        raise DashboardError(400, f"?status= must be one of {', '.join(Status.values())}, not {status[:40]!r}")
    return status


def mark_status(run: Run, now_ms: int) -> str:
    """What a run's mark shows: its status, or :data:`HANDED_OVER` for a running run whose latest
    attempt was released by a stopping instance and not yet taken over (``now_ms``: the store's
    clock, for a run that records no attempts)."""
    if run.status != Status.RUNNING:
        return str(run.status)
    if run.attempts:
        released = run.attempts[-1].outcome == AttemptOutcome.HANDED_OVER
    else:  # a run without recorded attempts: released is all its fields can say
        released = run.handed_over and run.lease_end_ms <= now_ms
    return HANDED_OVER if released else str(run.status)


def live_runs(runs: Sequence[Run], now_ms: int) -> List[Run]:
    """The runs that are running with a live lease on the store's clock ``now_ms``, oldest slot first."""
    return sorted((run for run in runs if run.lease_alive(now_ms)), key=lambda run: run.slot_ms)


def live_dict(run: Run, now_ms: int) -> Dict[str, object]:
    """A live run for the API: which attempt runs where, and how long its lease lasts."""
    return {
        "slot_ms": run.slot_ms,
        "attempt": run.attempt,
        "runner": run.runner,
        "lease_end_ms": run.lease_end_ms,
        "lease_left_ms": max(0, run.lease_end_ms - now_ms),
    }


@dataclasses.dataclass(frozen=True)
class JobView:
    """One job as the dashboard shows it: its state in the store (a plain unpaused state when the
    store keeps none), its newest runs (newest first), its schedule (as text) and next slot when
    they are known (:func:`~leasecron.jobs.shown_schedule`), whether the application's cron
    registers it, what the store holds of its schedule (``record``, None when nothing was ever
    stored), the schedules the live instances give it in their code (``in_use``, the most
    used first: several while they disagree), and its request for a manual run made since its
    last run started that expired unclaimed (``expired``, :func:`~leasecron.jobs.expired_request`)."""

    name: str
    state: JobState
    runs: Tuple[Run, ...]
    registered: bool = False
    schedule: Optional[str] = None
    next_ms: Optional[int] = None
    record: Optional[StoredSchedule] = None
    code_tz: Optional[str] = None
    in_use: Tuple[InUse, ...] = ()
    expired: Optional[ManualRequest] = None

    def live(self, now_ms: int) -> List[Run]:
        """Its runs with a live lease."""
        return live_runs(self.runs, now_ms)

    @property
    def in_code(self) -> bool:
        """Whether it is a job of the code: the app's cron registers it, or a live instance does."""
        return self.registered or bool(self.in_use)

    @property
    def disagreeing(self) -> bool:
        """Whether the live instances give it different schedules in their code."""
        return len(self.in_use) > 1

    @property
    def stored(self) -> Optional[StoredSchedule]:
        """The record when the job's schedule comes from the store: an override, or a stored job
        whose name is no job of the code (a stored job never takes a code job's name)."""
        record = self.record
        if record is None or not record.active or (record.source == ScheduleSource.STORED and self.in_code):
            return None
        return record

    @property
    def source(self) -> Optional[str]:
        """Where its schedule comes from: ``override`` or ``stored`` (the store), ``code`` (a job of
        the app, or one a live instance registers), or None (nothing stored, no app that registers
        it and no live instance that does: unknown here)."""
        stored = self.stored
        if stored is not None:
            return stored.source
        return str(ScheduleSource.CODE) if self.in_code else None

    @property
    def tz(self) -> Optional[str]:
        """The stored zone of an override or stored job (None: the job's or the instances' own), or
        the code job's zone (the app's, else the most used one the live instances announce)."""
        stored = self.stored
        if stored is not None:
            return stored.tz
        if self.code_tz is None and self.in_use:
            return self.in_use[0].tz
        return self.code_tz

    @property
    def version(self) -> int:
        """The version its claims carry: the record's, 0 when nothing was ever stored."""
        return self.record.version if self.record is not None else 0


def announced_text(schedule: str, tz: str) -> str:
    """A schedule as an instance announces it (a cron string, or an interval's seconds, and its
    zone), written as the dashboard writes every schedule: ``0 9 * * 1-5 (Europe/Berlin)``,
    ``every 1h 00m``; as it stands, with its zone, when this host cannot read it."""
    try:
        return format_schedule(make_schedule(schedule_spec(schedule), tz))
    except ConfigError:  # a zone this host does not know, or a newer release's schedule
        return f"{schedule} ({tz})"


def _view(name: str, state: Optional[JobState], runs: Sequence[Run], cron: Optional[LeaseCron],
          now_ms: int, record: Optional[StoredSchedule], in_use: Tuple[InUse, ...],
          newest: Optional[Run]) -> JobView:
    """The view of job ``name``; ``newest`` is its newest run (None: it has none)."""
    job = cron.jobs.get(name) if cron is not None else None
    defaults = dict(cron._defaults) if cron is not None else None
    schedule, _ = shown_schedule(job, record, defaults, in_use[0] if in_use else None)
    shown = format_schedule(schedule) if schedule is not None else None
    if shown is None and record is not None and record.active and record.schedule is not None:
        shown = record.schedule  # its text: the zone it runs in is each instance's
    elif shown is None and in_use:
        shown = in_use[0].schedule  # in a zone this host does not know: the instances do
    return JobView(
        name=name,
        state=state if state is not None else JobState(name),
        runs=tuple(runs),
        registered=job is not None,
        schedule=shown,
        next_ms=schedule.next_after(now_ms) if schedule is not None else None,
        record=record,
        code_tz=job.options.tz if job is not None else None,
        in_use=in_use,
        expired=expired_request(state, newest),
    )


def job_dict(view: JobView, now_ms: int) -> Dict[str, object]:
    """A job for the API: its state (``job``, ``paused``, ``paused_by``, ``paused_ms``, ``note``,
    ``requests``), ``registered``, ``schedule``, ``tz``, ``source`` (``code``, ``override``,
    ``stored``; None when unknown), ``version``, ``stored_schedule`` (the store's record, as
    :meth:`~leasecron.StoredSchedule.to_dict`, or None), ``next_slot_ms``, ``runs`` (newest first,
    as :meth:`~leasecron.Run.to_dict`), ``live`` (:func:`live_dict`) and ``in_use`` (each
    schedule the live instances give it in their code, ``{"schedule", "tz", "runners"}``, the
    most used first; several while they disagree) and ``expired_request`` (the request made since
    its last run started that expired unclaimed, in the form of each of ``requests``, or None),
    as ``leasecron jobs --json`` gives them."""
    return {
        **view.state.to_dict(),
        "registered": view.registered,
        "schedule": view.schedule,
        "tz": view.tz,
        "source": view.source,
        "version": view.version,
        "stored_schedule": view.record.to_dict() if view.record is not None else None,
        "next_slot_ms": view.next_ms,
        "runs": [run.to_dict() for run in view.runs],
        "live": [live_dict(run, now_ms) for run in view.live(now_ms)],
        "in_use": [dataclasses.asdict(use) for use in view.in_use],
        "expired_request": view.expired.to_dict() if view.expired is not None else None,
    }


@dataclasses.dataclass(frozen=True)
class JobsPage:
    """One page of jobs: ``jobs`` on page ``page`` (from 1) of ``per_page``, out of ``total``
    jobs whose name contains ``q`` (every job when ``q`` is empty)."""

    now_ms: int
    jobs: List[JobView]
    page: int
    per_page: int
    total: int
    q: str

    @property
    def pages(self) -> int:
        """How many pages there are (at least 1)."""
        return max(1, -(-self.total // self.per_page))


def read_jobs_page(store: Store, cron: Optional[LeaseCron], page: int, per_page: int, q: str) -> JobsPage:
    """Page ``page`` of the jobs whose name contains ``q`` (ignoring case), sorted by name, with
    their newest :data:`MARKS` runs, stored schedules and the schedules the live instances
    announce: six store calls, whatever the number of jobs."""
    now_ms = store.now_ms()
    states = {state.job: state for state in store.job_states()}
    records = {record.job: record for record in store.schedule_changes(0).changes}
    in_use = schedules_in_use(store.instances())
    stored = {name for name, record in records.items() if record.active}
    names = set(store.jobs()) | set(states) | stored | set(in_use) | (set(cron.jobs) if cron is not None else set())
    needle = q.casefold()
    chosen = sorted(name for name in names if needle in name.casefold())
    on_page = chosen[(page - 1) * per_page : page * per_page]
    runs: Dict[str, List[Run]] = store.recent_runs(on_page, MARKS) if on_page else {}
    jobs = [_view(name, states.get(name), runs.get(name, []), cron, now_ms, records.get(name), in_use.get(name, ()),
                  next(iter(runs.get(name, [])), None)) for name in on_page]  # fmt: skip
    return JobsPage(now_ms, jobs, page, per_page, len(chosen), q)


def read_job(store: Store, cron: Optional[LeaseCron], job: str, status: Optional[str],
             limit: int) -> Tuple[int, JobView]:
    """The store's clock and ``job`` with its stored schedule, the schedules the live instances
    give it in their code, and its newest ``limit`` runs (of ``status`` only, when given: those
    among the newest :data:`MAX_RUNS`)."""
    now_ms = store.now_ms()
    state = store.job_state(job)
    record = store.stored_schedule(job)
    in_use = schedules_in_use(store.instances()).get(job, ())
    if status is None:
        runs = every = store.runs(job, limit=limit)
    else:
        every = store.runs(job, limit=MAX_RUNS)
        runs = [run for run in every if run.status == status][:limit]
    return now_ms, _view(job, state, runs, cron, now_ms, record, in_use, every[0] if every else None)


@dataclasses.dataclass(frozen=True)
class Bar:
    """Where an attempt's bar lies on its run's timeline, in percent of the run's span; ``returned``:
    where its handler's return (rule 26) lies on it, if one was recorded."""

    offset: float
    width: float
    ended_ms: int
    returned: Optional[float] = None


def bars(run: Run, now_ms: int) -> List[Tuple[Attempt, Bar]]:
    """Each of ``run``'s attempts (oldest first) with its bar: the run's span runs from its first
    attempt's start to its last end (``now_ms`` for an attempt still running) or a later recorded
    return of a handler; each bar is at least half a percent wide, so that an instant still shows."""
    if not run.attempts:
        return []
    ends = [a.ended_ms if a.ended_ms is not None else max(now_ms, a.started_ms) for a in run.attempts]
    start = min(a.started_ms for a in run.attempts)
    returns = [a.returned_ms for a in run.attempts if a.returned_ms is not None]
    span = max(1, max(ends + returns) - start)
    result = []
    for attempt, end in zip(run.attempts, ends):
        offset = min(99.5, (attempt.started_ms - start) * 100 / span)
        width = min(100 - offset, max(0.5, (end - attempt.started_ms) * 100 / span))
        returned = None
        if attempt.returned_ms is not None:
            returned = round(min(99.5, max(0.0, (attempt.returned_ms - start) * 100 / span)), 2)
        result.append((attempt, Bar(round(offset, 2), round(width, 2), end, returned)))
    return result
