"""leasecron.watching (issue 32, "Watching it"): the pure computation of a job's last success,
last finish by status, next slot and overdue; and :func:`read_watches` on every store, with a
scene of real runs written through the store contract (slots in the past, so that nothing waits
for a slot to fall due), in one store call (``Store.overview``) whatever the number of jobs.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import pytest

from leasecron import LeaseCron, Run, Store, StoreUnavailable
from leasecron.schedules import make_schedule
from leasecron.stored import JobOverview
from leasecron.stores import DelegatingStore
from leasecron.stores.checks import MAX_RECENT_JOBS
from leasecron.watching import OVERDUE_GRACE_MS, read_watches
from leasecron.watching import watch as watch_summary
from tests.conftest import Backend
from tests.engine.support import NEVER_LATE
from tests.helpers import wait_for

DAY_MS = 86_400_000
#: Every job of the scene is due daily at 00:00 UTC (an interval of a day) and may be 1 s late.
DAILY = 86_400
LATE_MS = 1_000
#: The reads a watch may make; ``Counted`` counts each.
READS = ("now_ms", "_job_state", "_job_states", "_pending_requests", "_stored_schedule", "_schedule_changes",
         "_poll", "_instances", "_get_run", "_unfinished", "_runs", "_recent_runs", "_jobs", "_overview")  # fmt: skip


# -- the pure computation --------------------------------------------------------------------------


def a_run(slot_ms: int, status: str, finished_ms: Optional[int], job: str = "job") -> Run:
    """A run as a store answers it (only the fields a watch reads matter)."""
    return Run(job=job, slot_ms=slot_ms, attempt=1, token="t", runner="r", status=status, lease_end_ms=slot_ms + 1,
               handed_over=False, reason="schedule", error="boom" if status == "failed" else None,
               started_ms=slot_ms, finished_ms=finished_ms)  # fmt: skip


def watch(job: str, runs: Sequence[Run], *args: Any, **kwargs: Any) -> Any:
    """:func:`~leasecron.watching.watch` of the summary a store gives of these ``runs`` (newest first)."""
    return watch_summary(job, JobOverview.of_runs(job, runs), *args, **kwargs)


HOURLY = make_schedule(3600)
H = 3_600_000
T0 = 1_767_607_200_000  # a Monday, 10:00 UTC: an hourly slot


def test_last_success_and_last_finish_by_status_are_the_newest_ends() -> None:
    """The newest finished_ms of each status among the runs (not the newest slot's); a running run
    counts for none; next slot strictly after now."""
    runs = [a_run(T0, "running", None), a_run(T0 - H, "failed", T0 - H + 5), a_run(T0 - 2 * H, "success", T0 + 9),
            a_run(T0 - 3 * H, "success", T0 - 3 * H + 7), a_run(T0 - 4 * H, "interrupted", T0 - 4 * H + 1)]  # fmt: skip
    seen = watch("job", runs, HOURLY, LATE_MS, False, T0 + 20)
    assert seen.last_success_ms == T0 + 9
    assert dict(seen.last_finish_ms) == {"success": T0 + 9, "failed": T0 - H + 5, "interrupted": T0 - 4 * H + 1}
    assert seen.next_slot_ms == T0 + H and seen.last == runs[0] and not seen.failed and not seen.overdue
    assert watch("job", runs[1:], HOURLY, LATE_MS, False, T0 + 20).failed  # its newest run failed
    empty = watch("job", [], HOURLY, LATE_MS, False, T0)
    assert (empty.last_success_ms, dict(empty.last_finish_ms), empty.last, empty.overdue) == (None, {}, None, False)


def test_overdue_once_a_slot_after_the_newest_run_is_due_more_than_max_late_plus_10_s() -> None:
    """The slot T0 after a run at T0 - 1 h: not overdue at T0 + max_late + 10 s, overdue 1 ms later;
    never while paused (its next slot still given), nor without a run, nor for a slot before the
    schedule took effect, nor when its max_late_ms is not known; a run at T0 (or a later manual
    run) clears it."""
    runs = [a_run(T0 - H, "success", T0 - H + 10)]
    edge = T0 + LATE_MS + OVERDUE_GRACE_MS
    assert not watch("job", runs, HOURLY, LATE_MS, False, edge).overdue
    seen = watch("job", runs, HOURLY, LATE_MS, False, edge + 1)
    assert (seen.overdue, seen.overdue_slot_ms, seen.to_dict()["overdue_slot_ms"]) == (True, T0, T0)
    paused = watch("job", runs, HOURLY, LATE_MS, True, edge + 1)
    assert (paused.overdue, paused.next_slot_ms) == (False, T0 + H)
    assert not watch("job", [], HOURLY, LATE_MS, False, edge + 1).overdue
    assert not watch("job", runs, HOURLY, LATE_MS, False, edge + 1, since_ms=T0 + 1).overdue
    assert watch("job", runs, HOURLY, LATE_MS, False, edge + 1, since_ms=T0).overdue
    assert not watch("job", runs, HOURLY, None, False, edge + 1).overdue
    assert not watch("job", [a_run(T0, "failed", T0 + 1)] + runs, HOURLY, LATE_MS, False, edge + 1).overdue
    assert not watch("job", [a_run(T0 + 5, "success", T0 + 6)] + runs, HOURLY, LATE_MS, False, edge + 1).overdue
    assert watch("job", runs, HOURLY, LATE_MS, False, T0 + 5 * H).overdue_slot_ms == T0 + 4 * H  # the latest


def test_the_summary_s_last_finishes_are_taken_as_the_store_gives_them() -> None:
    """A summary whose last success is older than its newest run (by far: the store found it among
    every run it keeps) gives that success; the newest run is the summary's, and overdue is judged
    from its slot."""
    newest = a_run(T0 - H, "failed", T0 - H + 5)
    summary = JobOverview("job", newest, {"success": T0 - 80 * H, "failed": T0 - H + 5})
    seen = watch_summary("job", summary, HOURLY, LATE_MS, False, T0 + LATE_MS + OVERDUE_GRACE_MS + 1)
    assert (seen.last, seen.last_success_ms, seen.failed, seen.overdue_slot_ms) == (newest, T0 - 80 * H, True, T0)
    assert dict(seen.last_finish_ms) == {"success": T0 - 80 * H, "failed": T0 - H + 5}


# -- on every store --------------------------------------------------------------------------------


class Counted(DelegatingStore):
    """A real store whose reads are counted (``calls``), and fail while ``failing``."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: List[str] = []
        self.failing = False


def _counted(name: str) -> Any:
    def method(self: Counted, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        if self.failing:
            raise StoreUnavailable("the store is down")
        return getattr(DelegatingStore, name)(self, *args, **kwargs)

    return method


for _name in READS:
    setattr(Counted, _name, _counted(_name))


def ended(
    store: Store, job: str, slot_ms: int, status: str = "success", lease_ms: int = 30_000, version: int = 0
) -> Run:
    """A run of ``job`` at ``slot_ms`` (in the past), won and ended with ``status`` (or left
    ``running`` with its lease of ``lease_ms``); ``version``: of its stored schedule."""
    claim = store.claim(job, slot_ms, runner="elsewhere", max_late_ms=NEVER_LATE, lease_ms=lease_ms, version=version)
    assert claim.outcome == "won" and claim.run is not None, claim
    if status != "running":
        assert store.finish(job, slot_ms, claim.run.token, status, "boom" if status == "failed" else None)
    run = store.get_run(job, slot_ms)
    assert run is not None
    return run


class Scene:
    """On a real store: jobs due daily, each with runs that make it one case (``today`` is the
    latest slot due more than max_late_ms + 10 s ago)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        now = store.now_ms()
        today = make_schedule(DAILY).at_or_before(now - LATE_MS - OVERDUE_GRACE_MS - 1)
        assert today is not None
        self.today = today
        self.runs: Dict[str, Run] = {}
        self.runs["late"] = ended(store, "late", today - DAY_MS)  # today's slot has no run: overdue
        self.runs["fine"] = ended(store, "fine", today)
        self.runs["broken-before"] = ended(store, "broken", today - DAY_MS)
        self.runs["broken"] = ended(store, "broken", today, "failed")
        dead = ended(store, "cut", today - DAY_MS, "running", lease_ms=300)
        wait_for(lambda: store.now_ms() > dead.lease_end_ms, 3)
        self.runs["cut"] = ended(store, "cut", today)  # the newer run's claim interrupts the dead one
        self.runs["cut-before"] = store.get_run("cut", today - DAY_MS)  # type: ignore[assignment]
        assert self.runs["cut-before"].status == "interrupted"
        self.runs["resting"] = ended(store, "resting", today - DAY_MS)
        store.pause("resting", by="ops", note="vendor down")
        ended(store, "unknown", today - DAY_MS)  # stored runs, but neither registered nor stored: not watched
        kept = store.set_schedule("kept", by="ops", schedule=DAILY, task="t", options={"max_late_ms": LATE_MS})
        # its schedule took effect after today's slot: not overdue
        self.runs["kept"] = ended(store, "kept", today - DAY_MS, version=kept.version)
        self.cron = LeaseCron(store, runner="w", max_late_ms=LATE_MS)
        for name in ("late", "fine", "broken", "cut", "resting", "fresh"):
            self.cron.add_job(lambda: None, DAILY, name=name)
        self.cron.task("t")(lambda: None)


def test_read_watches_on_every_store(backend: Backend) -> None:
    """Every job the instance knows (registered, or stored), watched from its stored runs, its
    pause and its schedule, with one store call (overview); a failing store raises."""
    store = Counted(backend.open())
    scene = Scene(store)
    today, runs = scene.today, scene.runs
    store.calls.clear()
    read = read_watches(store, scene.cron.jobs, dict(scene.cron._defaults))
    assert store.calls == ["_overview"]
    jobs = read.jobs
    assert sorted(jobs) == ["broken", "cut", "fine", "fresh", "kept", "late", "resting"]
    assert {name for name, seen in jobs.items() if seen.overdue} == {"late"}
    assert jobs["late"].overdue_slot_ms == today and jobs["late"].max_late_ms == LATE_MS
    assert {name for name, seen in jobs.items() if seen.failed} == {"broken"}
    assert {name for name, seen in jobs.items() if seen.paused} == {"resting"}
    for name in ("late", "fine", "cut", "resting", "kept"):
        assert jobs[name].last_success_ms == runs[name].finished_ms, name
    assert jobs["broken"].last_finish_ms["failed"] == runs["broken"].finished_ms
    assert jobs["broken"].last_success_ms == runs["broken-before"].finished_ms
    assert jobs["cut"].last_finish_ms["interrupted"] == runs["cut-before"].finished_ms
    assert (jobs["fresh"].last, jobs["fresh"].last_success_ms, dict(jobs["fresh"].last_finish_ms)) == (None, None, {})
    for name, seen in jobs.items():
        assert seen.next_slot_ms == make_schedule(DAILY).next_after(read.now_ms), name  # paused too
    store.failing = True
    with pytest.raises(StoreUnavailable):
        read_watches(store, scene.cron.jobs, None)


def test_read_watches_is_one_overview_call_whatever_the_number_of_jobs(memory_store: Store) -> None:
    """1,001 registered jobs (more than one recent_runs call takes) and a stored one: one overview
    call, nothing else."""
    store = Counted(memory_store)
    cron = LeaseCron(store, runner="w")
    for n in range(MAX_RECENT_JOBS + 1):
        cron.add_job(lambda: None, DAILY, name=f"job-{n}")
    memory_store.set_schedule("stored", by="ops", schedule=DAILY, task="t")
    read = read_watches(store, cron.jobs, None)
    assert len(read.jobs) == MAX_RECENT_JOBS + 2 and "stored" in read.jobs
    assert store.calls == ["_overview"]


@pytest.fixture
def memory_store() -> Store:
    from leasecron import MemoryStore

    return MemoryStore()
