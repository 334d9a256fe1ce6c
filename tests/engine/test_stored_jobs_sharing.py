"""StoredJobs builds a stored job that repeats another's schedule, zone, task and options from that
one: the same parsed schedule and options, its own name, version and kwargs, and otherwise the job
``effective_job`` makes (what an instance with 100,000 stored jobs of a few schedules needs to start
within seconds: parsing each cron string took most of the start).

The records are a real store's (a ``MemoryStore``'s ``set_schedule``), read with ``schedule_changes``.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Dict

import pytest

from leasecron import MemoryStore
from leasecron.engine import stored_jobs
from leasecron.engine.stored_jobs import StoredJobs
from leasecron.jobs import Job, effective_job, make_task
from leasecron.stored import StoredSchedule

pytestmark = pytest.mark.timeout(30)


def send(team: int = 0, lang: str = "en") -> None:
    """The task of the stored jobs here."""


def records(store: MemoryStore) -> Dict[str, StoredSchedule]:
    """The store's newest record of each job."""
    return {r.job: r for r in store.schedule_changes(0).changes}


def built(store: MemoryStore, defaults: Dict[str, Any] = {}) -> StoredJobs:  # noqa: B006 - never changed
    jobs = StoredJobs("r", defaults)
    jobs.add_tasks([make_task(send, "send")])
    jobs.apply(store.schedule_changes(0).changes)
    return jobs


def fields(job: Job) -> Dict[str, Any]:
    """Every field of a job (a new field of Job too), the schedule as its expression and zone and
    the handler as its function and keyword arguments."""
    out: Dict[str, Any] = {}
    for field in dataclasses.fields(job):
        value = getattr(job, field.name)
        if field.name == "schedule":
            value = (value.expression, value.tz)
        elif field.name == "func":
            value = (value.func, value.keywords) if isinstance(value, functools.partial) else (value, {})
        out[field.name] = value
    return out


def test_jobs_of_one_schedule_share_it_and_keep_their_own_name_version_and_kwargs() -> None:
    store = MemoryStore()
    for team in range(3):
        store.set_schedule(f"report-{team}", by="t", schedule="0 9 * * 1-5", tz="Europe/Berlin", task="send",
                           kwargs={"team": team} if team else None)  # fmt: skip
    time.sleep(0.005)  # a later change: its record's updated_ms differs from the first job's
    store.set_schedule("report-1", by="t", schedule="0 9 * * 1-5", tz="Europe/Berlin", task="send", kwargs={"team": 1})
    jobs = built(store)
    a, b, c = (jobs.job(f"report-{team}") for team in range(3))
    assert a is not None and b is not None and c is not None
    assert a.schedule is b.schedule is c.schedule
    assert a.options is b.options is c.options
    assert [b.version, c.version] == [2, 1]
    assert a.func is send and b.func.keywords == {"team": 1} and c.func.keywords == {"team": 2}  # type: ignore[attr-defined]
    by_name = records(store)
    tasks = {"send": make_task(send, "send")}
    assert by_name["report-1"].updated_ms > by_name["report-0"].updated_ms
    for job in (a, b, c):
        made = effective_job(job.name, None, by_name[job.name], tasks, {})
        assert made is not None and fields(job) == fields(made)


def test_another_zone_options_or_schedule_is_a_job_of_its_own() -> None:
    store = MemoryStore()
    store.set_schedule("berlin", by="t", schedule="0 9 * * *", tz="Europe/Berlin", task="send")
    store.set_schedule("tokyo", by="t", schedule="0 9 * * *", tz="Asia/Tokyo", task="send")
    store.set_schedule("long", by="t", schedule="0 9 * * *", tz="Europe/Berlin", task="send",
                       options={"lease_ms": 120_000})  # fmt: skip
    store.set_schedule("ten", by="t", schedule="0 10 * * *", tz="Europe/Berlin", task="send")
    jobs = built(store)
    berlin, tokyo, long, ten = (jobs.job(n) for n in ("berlin", "tokyo", "long", "ten"))
    assert berlin is not None and tokyo is not None and long is not None and ten is not None
    assert tokyo.schedule.tz == "Asia/Tokyo" and berlin.schedule.tz == "Europe/Berlin"  # type: ignore[attr-defined]
    assert long.options.lease_ms == 120_000 and berlin.options.lease_ms != 120_000
    assert ten.schedule.expression == "0 10 * * *"  # type: ignore[attr-defined]
    assert len({id(j.schedule) for j in (berlin, tokyo, ten)}) == 3


def test_a_changed_job_gets_its_new_schedule_and_the_instances_defaults_stay_in_its_options() -> None:
    store = MemoryStore()
    store.set_schedule("a", by="t", schedule="0 9 * * *", task="send")
    store.set_schedule("b", by="t", schedule="0 9 * * *", task="send")
    jobs = built(store, {"tz": "Europe/Paris", "lease_ms": 90_000})
    b = jobs.job("b")
    assert b is not None and b.schedule.tz == "Europe/Paris" and b.options.lease_ms == 90_000  # type: ignore[attr-defined]
    changed = store.set_schedule("b", by="t", schedule="30 18 * * *", task="send")
    assert jobs.apply([changed]) == ["b"]
    b2, a = jobs.job("b"), jobs.job("a")
    assert b2 is not None and a is not None
    assert b2.schedule.expression == "30 18 * * *" and b2.version == 2  # type: ignore[attr-defined]
    assert a.schedule.expression == "0 9 * * *"  # type: ignore[attr-defined]


def test_the_kept_builds_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stored_jobs, "SHARED_KEPT", 2)
    store = MemoryStore()
    for i in range(5):
        store.set_schedule(f"j{i}", by="t", schedule=f"{i} 9 * * *", task="send")
    jobs = built(store)
    assert len(jobs._shared) <= 2
    assert [j.schedule.expression for j in jobs.jobs()] == [f"{i} 9 * * *" for i in range(5)]  # type: ignore[attr-defined]
