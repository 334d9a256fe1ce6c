"""The gauges read from the store (issue 32, "Watching it"): last success, last finish by status,
next slot, paused and overdue for every job an instance knows, on every store, in one store
call per scrape (``Store.overview``) whatever the number of jobs; a store that fails leaves them out of that scrape,
logged; a started instance that catches the missed slot up clears ``overdue``.
"""

from __future__ import annotations

import re
from typing import Optional

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from leasecron import LeaseCron
from leasecron.contrib.prometheus import instrument
from leasecron.schedules import make_schedule
from tests.conftest import Backend
from tests.engine import conftest as engine_conftest
from tests.engine.conftest import MakeCron
from tests.engine.support import Recorder
from tests.helpers import wait_for
from tests.test_watching import DAILY, DAY_MS, Counted, Scene, ended

make_cron = engine_conftest.make_cron
gates = engine_conftest.gates
JOB_GAUGES = ("leasecron_job_paused", "leasecron_job_last_success_timestamp_seconds",
              "leasecron_job_last_finish_timestamp_seconds", "leasecron_job_next_slot_timestamp_seconds",
              "leasecron_job_overdue")  # fmt: skip


def value(registry: CollectorRegistry, name: str, **labels: str) -> Optional[float]:
    """A sample's value, or None when the series does not exist."""
    return registry.get_sample_value(name, labels)


def test_the_gauges_of_every_job_on_every_store(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """An instance that was never started, its store holding runs of each case: each gauge of
    each job it knows (registered, or stored), from one store call; a job it does not know has
    none. A store that fails leaves the job gauges out of that scrape, logged; live_runs stays."""
    store = Counted(backend.open())
    scene = Scene(store)
    runs = scene.runs
    registry = CollectorRegistry()
    instrument(scene.cron, registry=registry)
    store.calls.clear()
    text = generate_latest(registry).decode()
    assert store.calls == ["_overview"]
    now = store.now_ms()
    overdue = {job: value(registry, "leasecron_job_overdue", job=job) for job in scene.cron.jobs}
    assert overdue == {"late": 1, "fine": 0, "broken": 0, "cut": 0, "resting": 0, "fresh": 0}
    assert value(registry, "leasecron_job_overdue", job="kept") == 0  # a stored job: known too
    assert value(registry, "leasecron_job_overdue", job="unknown") is None
    assert value(registry, "leasecron_job_paused", job="resting") == 1
    assert value(registry, "leasecron_job_paused", job="late") == 0
    for job in ("late", "fine", "cut", "resting", "kept"):
        finished = runs[job].finished_ms
        assert finished is not None
        assert value(registry, "leasecron_job_last_success_timestamp_seconds", job=job) == finished / 1000, job
        assert value(registry, "leasecron_job_last_finish_timestamp_seconds", job=job, status="success") == (
            finished / 1000
        )
    failed = runs["broken"].finished_ms
    assert failed is not None
    finish = "leasecron_job_last_finish_timestamp_seconds"
    assert value(registry, finish, job="broken", status="failed") == failed / 1000
    interrupted = runs["cut-before"].finished_ms
    assert interrupted is not None
    assert value(registry, "leasecron_job_last_finish_timestamp_seconds", job="cut", status="interrupted") == (
        interrupted / 1000
    )
    assert value(registry, "leasecron_job_last_finish_timestamp_seconds", job="fine", status="failed") is None
    assert value(registry, "leasecron_job_last_success_timestamp_seconds", job="fresh") is None
    next_slot = make_schedule(DAILY).next_after(now) / 1000
    for job in ("late", "fine", "broken", "cut", "resting", "fresh", "kept"):
        assert value(registry, "leasecron_job_next_slot_timestamp_seconds", job=job) == next_slot, job
    assert "# TYPE leasecron_job_overdue gauge" in text

    store.failing = True
    text = generate_latest(registry).decode()
    for name in JOB_GAUGES:
        assert re.findall(rf"^{name}\{{", text, re.M) == [], name
    assert value(registry, "leasecron_live_runs", job="late") == 0
    assert "leasecron: cannot read the jobs for the metrics, runner 'w': the store is down" in caplog.text


def test_one_scrape_reads_the_store_once_whatever_the_number_of_jobs(backend: Backend) -> None:
    """Two instances of one store, with 60 jobs between them and runs of each: one store call per
    scrape (shared by the instances of the store), as with one job."""
    store = Counted(backend.open())
    registry = CollectorRegistry()
    crons = [LeaseCron(store, runner=name) for name in ("a", "b")]
    slot = make_schedule(DAILY).at_or_before(store.now_ms() - DAY_MS)
    assert slot is not None
    for n in range(60):
        crons[n % 2].add_job(lambda: None, DAILY, name=f"job-{n}")
        ended(store, f"job-{n}", slot)
    for cron in crons:
        instrument(cron, registry=registry)
    store.calls.clear()
    text = generate_latest(registry).decode()
    assert store.calls == ["_overview"]
    assert len(re.findall(r"^leasecron_job_overdue\{", text, re.M)) == 60
    assert len(re.findall(r"^leasecron_job_last_success_timestamp_seconds\{", text, re.M)) == 60


def test_an_instance_catching_the_missed_slot_up_clears_overdue(backend: Backend, make_cron: MakeCron) -> None:
    """A job overdue (yesterday's run stored, today's slot missed): an instance that starts and
    catches today's slot up runs it, and the next scrape says 0 and the new success."""
    registry = CollectorRegistry()
    cron = make_cron("a", catch_up_ms=2 * DAY_MS, max_late_ms=1_000)
    today = make_schedule(DAILY).at_or_before(cron.store.now_ms() - 11_001)
    assert today is not None
    ended(cron.store, "job", today - DAY_MS)
    cron.add_job(lambda: None, DAILY, name="job")
    instrument(cron, registry=registry)
    assert value(registry, "leasecron_job_overdue", job="job") == 1
    rec = Recorder(cron)
    cron.start()
    done = rec.wait("success", timeout=5)
    assert done.slot_ms == today
    wait_for(lambda: value(registry, "leasecron_job_overdue", job="job") == 0, 3)
    run = cron.store.get_run("job", today)
    assert run is not None and run.finished_ms is not None
    assert value(registry, "leasecron_job_last_success_timestamp_seconds", job="job") == run.finished_ms / 1000
