"""Schedules as data on real instances (rules 23-24): ``reschedule``, ``task``, ``put_job``,
``delete_job`` and ``stored_jobs``, the poll that brings the changes, and the version fence.

Two instances share a store; each applies a change within its ``poll_ms`` (the one that made it at
once); an instance that has not yet read a change is fenced: its claim of the old schedule is
answered ``stale`` (``skip``, reason ``rescheduled``), and it reads the job's schedule again. The
store-level rules are proved on every store in tests/stores/test_schedules.py; here the engine is
run on the in-process stores and one server store of each kind.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Tuple

import pytest

from leasecron import ConfigError, Context, LeaseCron
from tests.engine.conftest import MakeCron
from tests.engine.support import HOURLY, MARGIN, Recorder
from tests.helpers import wait_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgresql"], indirect=True),
]

#: How often the instances poll in these tests, in ms.
POLL = 200


class Ran:
    """What the handlers ran: (job, slot_ms, kwargs) each, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: List[Tuple[str, int, Dict[str, Any]]] = []

    def add(self, ctx: Context, **kwargs: Any) -> None:
        with self._lock:
            self.runs.append((ctx.job, ctx.slot_ms, kwargs))

    def of(self, job: str) -> List[int]:
        """The slots ``job`` ran, in order."""
        with self._lock:
            return [slot for name, slot, _ in self.runs if name == job]


def _pair(make_cron: MakeCron, ran: Ran, **options: Any) -> List[LeaseCron]:
    """Two instances with an hourly code job ``tick`` and the task ``send``."""
    crons = [make_cron(runner, catch_up_ms=0, poll_ms=POLL, **options) for runner in ("a", "b")]
    for cron in crons:
        cron.add_job(ran.add, HOURLY, name="tick")
        cron.task("send")(ran.add)
    return crons


def test_a_reschedule_runs_the_new_schedule_on_every_instance_each_slot_once(make_cron: MakeCron) -> None:
    """An hourly job rescheduled to every second: both instances run the new slots, each once;
    reset, it goes back to hourly (no second-slots after the reset is seen)."""
    ran = Ran()
    a, b = _pair(make_cron, ran)
    for cron in (a, b):
        cron.start()
    record = a.reschedule("tick", 1)
    assert (record.version, record.source, record.schedule) == (1, "override", "1")
    wait_for(lambda: len(ran.of("tick")) >= 3, 6, message="three slots of the new schedule")
    slots = ran.of("tick")
    assert len(slots) == len(set(slots)) and all(s % 1000 == 0 for s in slots)
    reset = b.reschedule("tick", None)
    assert (reset.version, reset.source) == (2, "code")
    wait_for(lambda: all(c.store.stored_schedule("tick") == reset for c in (a, b)), 2)
    settled = len(ran.of("tick"))
    threading.Event().wait(2 * POLL / 1000 + 1.2)  # a poll, then longer than one slot of the old override
    assert len(ran.of("tick")) <= settled + 1  # at most a slot claimed before the reset was seen


def test_an_instance_that_has_not_seen_a_change_is_fenced_and_reads_it_again(make_cron: MakeCron) -> None:
    """b polls once an hour: a's reschedule to every second is news to b until b's claim of the
    old schedule... here b runs every second in code and a moves it to hourly: b's next claim is
    stale (skip, reason rescheduled), b reads the schedule again, and claims no more seconds."""
    ran = Ran()
    b = make_cron("b", catch_up_ms=0, poll_ms=3_600_000)
    a = make_cron("a", catch_up_ms=0, poll_ms=POLL)
    for cron in (a, b):
        cron.add_job(ran.add, 1, name="fast")
    events = Recorder(b)
    b.start()
    wait_for(lambda: ran.of("fast"), 5, message="a first slot")
    a.reschedule("fast", HOURLY)
    skip = events.wait("skip", timeout=3, job="fast")
    assert skip.reason == "rescheduled"
    wait_for(lambda: b.jobs["fast"] is not None and _scheduled(b, "fast").version == 1, 2)
    count = len(ran.of("fast"))
    threading.Event().wait(1.5)
    assert len(ran.of("fast")) == count
    assert all(s < skip.slot_ms for s in ran.of("fast"))


def _scheduled(cron: LeaseCron, name: str) -> Any:
    """The job a started instance schedules under ``name`` now."""
    engine = cron._engine
    assert engine is not None
    return engine._stored.job(name)


def test_a_stored_job_runs_its_task_with_its_kwargs_once_per_slot_until_deleted(make_cron: MakeCron) -> None:
    """put_job on a: both instances run it from their next poll, each slot once, with the kwargs;
    stored_jobs lists it; after delete_job no new slot runs."""
    ran = Ran()
    a, b = _pair(make_cron, ran)
    for cron in (a, b):
        cron.start()
    job = a.put_job("report-3", task="send", schedule=1, kwargs={"team": 3}, lease_ms=2000)
    assert (job.name, job.task, job.kwargs, job.version, job.options) == (
        "report-3", "send", {"team": 3}, 1, {"lease_ms": 2000})  # fmt: skip
    wait_for(lambda: len(ran.of("report-3")) >= 3, 6, message="three runs of the stored job")
    assert [s.name for s in b.stored_jobs()] == ["report-3"]
    with ran._lock:
        kwargs = [k for name, _, k in ran.runs if name == "report-3"]
    assert all(k == {"team": 3} for k in kwargs)
    deleted = b.delete_job("report-3")
    assert (deleted.version, deleted.source) == (2, "code")
    wait_for(lambda: all(_scheduled(c, "report-3") is None for c in (a, b)), 2)
    count = len(ran.of("report-3"))
    threading.Event().wait(1.3)
    assert len(ran.of("report-3")) <= count + 1 and b.stored_jobs() == []
    slots = ran.of("report-3")
    assert len(slots) == len(set(slots))


def test_an_instance_started_later_loads_the_stored_jobs_before_its_first_slot(make_cron: MakeCron) -> None:
    """A stored job put before any instance starts runs on the first one started."""
    ran = Ran()
    a = make_cron("a", catch_up_ms=0, poll_ms=3_600_000)
    a.task("send")(ran.add)
    a.put_job("nightly", task="send", schedule=1, kwargs={"team": 9})
    a.start()
    wait_for(lambda: ran.of("nightly"), 3, message="the stored job's first slot")


def test_put_job_checks_before_anything_is_stored(make_cron: MakeCron) -> None:
    """A code job's name, kwargs the task's handler does not take, a bad cron string, options that do
    not go with the instance's: ConfigError, and nothing stored."""
    ran = Ran()
    (a, _) = _pair(make_cron, ran)

    @a.task("strict")
    def strict(ctx: Context, team: int) -> None:
        """A task that takes one keyword argument."""

    cases = [
        (dict(name="tick", task="send", schedule=1), "registered in code"),
        (dict(name="x", task="strict", schedule=1, kwargs={"nope": 1}), "do not fit task 'strict'"),
        (dict(name="x", task="strict", schedule=1), "do not fit task 'strict'"),
        (dict(name="x", task="send", schedule="99 * * * *"), "cron"),
        (dict(name="x", task="send", schedule=1, heartbeat_ms=400), "heartbeat_ms"),
    ]
    for fields, says in cases:
        with pytest.raises(ConfigError, match=says):
            a.put_job(**fields)
    assert a.store.schedule_changes(0).changes == ()
    with pytest.raises(ConfigError, match="not registered"):
        a.reschedule("unknown", 1)
    with pytest.raises(ConfigError, match="no stored job"):
        a.delete_job("tick")


def test_an_instance_without_the_task_warns_once_and_runs_nothing(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture
) -> None:
    """b lacks the task: one WARNING naming the job and the task; the job runs on a only."""
    ran = Ran()
    a = make_cron("a", catch_up_ms=0, poll_ms=POLL)
    b = make_cron("b", catch_up_ms=0, poll_ms=POLL)
    a.task("send")(ran.add)
    with caplog.at_level(logging.WARNING, logger="leasecron"):
        for cron in (a, b):
            cron.start()
        a.put_job("only-a", task="send", schedule=1)
        wait_for(lambda: len(ran.of("only-a")) >= 2, 5)
        wait_for(lambda: [r for r in caplog.records if "only-a" in r.getMessage()], 2)
    lines = [r.getMessage() for r in caplog.records if "skipping stored job 'only-a'" in r.getMessage()]
    assert len(lines) == 1 and "runner 'b'" in lines[0] and "no task 'send'" in lines[0], lines
    assert _scheduled(b, "only-a") is None and MARGIN > 0


def test_a_stored_job_under_a_code_jobs_name_leaves_the_code_job_running(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored job put (at store level) under the name of a's code job: a warns once and goes on
    running its code job, whose claims carry the record's version (never answered stale)."""
    ran = Ran()
    a = make_cron("a", catch_up_ms=0, poll_ms=POLL)
    a.add_job(ran.add, 1, name="tick")
    a.task("send")(ran.add)
    events = Recorder(a)
    with caplog.at_level(logging.WARNING, logger="leasecron"):
        a.start()
        a.store.set_schedule("tick", by="ops", schedule=3600, task="send")
        wait_for(lambda: _scheduled(a, "tick").version == 1, 2)
        count = len(ran.of("tick"))
        wait_for(lambda: len(ran.of("tick")) >= count + 2, 5, message="the code job's next slots")
    assert events.of("skip") == []
    lines = [r.getMessage() for r in caplog.records if "skipping stored job 'tick'" in r.getMessage()]
    assert len(lines) == 1 and "the code's job runs here" in lines[0], lines


def test_start_up_catches_up_no_slot_from_before_a_schedule_was_stored(make_cron: MakeCron) -> None:
    """An instance starting with catch-up on: a code job on a 60 s interval catches up its latest
    slot; a stored job on the same interval, put after that slot, does not (it was never its slot)."""
    ran = Ran()
    maker = make_cron("maker", poll_ms=POLL)
    maker.task("send")(ran.add)
    maker.put_job("stored-60", task="send", schedule=60)
    latest = maker.store.now_ms() // 60_000 * 60_000
    starter = make_cron("starter", poll_ms=POLL, catch_up_ms=120_000)
    starter.add_job(ran.add, 60, name="code-60")
    starter.task("send")(ran.add)
    starter.start()
    wait_for(lambda: latest in ran.of("code-60"), 10, message="the code job caught up its latest slot")
    wait_for(
        lambda: (
            starter.store.get_run("code-60", latest) is not None and starter.store.get_run("code-60", latest).finished
        ),
        5,
    )
    assert latest not in ran.of("stored-60")
    assert starter.store.get_run("stored-60", latest) is None
