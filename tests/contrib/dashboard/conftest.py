"""Fixtures of the dashboard's tests: real stores holding real runs, and a Flask test client.

Every run is made through the store's own operations (claim, finish, release,
heartbeat), with short leases where a lease must run out, and waits with
deadlines (``wait_for``). The dashboard is mounted under ``/cron`` in an app
of its own, as a user mounts it.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
from flask import Flask
from flask.testing import FlaskClient

from leasecron import Store
from leasecron.announcements import LiveInstance
from leasecron.contrib.dashboard import blueprint
from leasecron.runs import Claim, Run
from leasecron.stored import ScheduleChanges, StoredSchedule
from leasecron.stores.base import ClaimRequest
from leasecron.stores.delegating import DelegatingStore
from leasecron.controls import JobState
from tests.conftest import BACKENDS, Backend
from tests.helpers import wait_for
from tests.test_cli_instances import started  # noqa: F401 - the fixture: the instances a test starts, stopped at its end
from tests.contrib.dashboard.html import Node, parse

PREFIX = "/cron"
#: A claim's max_late_ms in these tests: the runs made here are a few seconds old.
LATE_MS = 600_000
#: An error text that must come back whole and escaped.
ERROR_TEXT = 'boom <b>bold</b> & "quoted" \'single\'\nsecond line <i>'

#: Names that try to break out of HTML, attributes, paths and percent-decoding.
HOSTILE = [
    "<script>alert(1)</script>",
    "\"quote'",
    "../x",
    "a/b",
    "%41%2F",
    ".",
    "..",
    "x" * 1000,
    "naïve 日本語 ✓ émoji 🚀",
    "a/runs/5",
    "/lead",
    "q?x=1#frag&y",
]


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The memory store and a SQLite file, each in turn."""
    b = BACKENDS[request.param](tmp_path)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A store of the current backend."""
    return backend.open()


def mount(store: Store, **options: Any) -> Flask:
    """An app with the dashboard of ``store`` under :data:`PREFIX`."""
    app = Flask("dashboard-test", static_folder=None)
    app.register_blueprint(blueprint(store, **options), url_prefix=PREFIX)
    return app


def client(store: Store, **options: Any) -> FlaskClient:
    """A test client of :func:`mount`."""
    return mount(store, **options).test_client()


def get_page(http: FlaskClient, url: str, status: int = 200) -> Node:
    """GET ``url`` and parse the page; the test fails on another status."""
    response = http.get(url)
    assert response.status_code == status, (url, response.status_code, response.get_data(as_text=True)[:2000])
    assert response.mimetype == "text/html"
    return parse(response.get_data(as_text=True))


def claim(store: Store, job: str, slot_ms: int, runner: str, lease_ms: int = 60_000, reason: str = "schedule") -> Run:
    """Claim a run that must be won; its run."""
    answer: Claim = store.claim(job, slot_ms, runner=runner, lease_ms=lease_ms, max_late_ms=LATE_MS,
                                overlap="allow", reason=reason)
    assert answer.won and answer.run is not None, (job, slot_ms, answer)
    return answer.run


def lease_over(store: Store, *runs: Run) -> None:
    """Wait until the store's clock has passed the leases of ``runs``."""
    end = max(run.lease_end_ms for run in runs)
    wait_for(lambda: store.now_ms() > end, timeout=10, message="the leases did not run out")


def history(store: Store, job: str) -> Dict[str, int]:
    """Give ``job`` one run of each kind, oldest slot first; their slots by kind.

    ``success`` (web-1), ``failed`` (web-2, :data:`ERROR_TEXT`), ``interrupted``
    (its lease ran out and a newer slot had a run), ``chain`` (attempt 1 on
    web-1 expired, attempt 2 on web-2 succeeded), ``handed-over`` (released,
    not taken over) and ``running`` (web-3, a live lease).
    """
    base = store.now_ms() - 6_000
    slots = {kind: base + 1000 * i for i, kind in
             enumerate(["success", "failed", "interrupted", "chain", "handed-over", "running"])}
    ok = claim(store, job, slots["success"], "web-1")
    assert store.finish(job, ok.slot_ms, ok.token, "success")
    bad = claim(store, job, slots["failed"], "web-2")
    assert store.finish(job, bad.slot_ms, bad.token, "failed", ERROR_TEXT)
    doomed = claim(store, job, slots["interrupted"], "web-1", lease_ms=50)
    first = claim(store, job, slots["chain"], "web-1", lease_ms=50)
    lease_over(store, doomed, first)
    gone = store.claim(job, doomed.slot_ms, runner="web-2", reason="takeover", max_late_ms=LATE_MS, overlap="allow")
    assert gone.outcome == "done" and gone.run is not None and gone.run.status == "interrupted", gone
    second = claim(store, job, first.slot_ms, "web-2", reason="takeover")
    assert second.attempt == 2
    assert store.finish(job, second.slot_ms, second.token, "success")
    released = claim(store, job, slots["handed-over"], "web-1")
    live = claim(store, job, slots["running"], "web-3")  # before the release: a new run would interrupt it
    assert store.release(job, released.slot_ms, released.token)
    assert store.heartbeat(job, live.slot_ms, live.token, 60_000)
    return slots


def simple_run(store: Store, job: str, status: str = "success", slot_ms: Optional[int] = None,
               error: Optional[str] = None) -> Run:
    """One finished run of ``job`` (at ``slot_ms``, default now), as the store holds it."""
    slot = store.now_ms() if slot_ms is None else slot_ms
    run = claim(store, job, slot, "web-1")
    assert store.finish(job, slot, run.token, status, error)
    found = store.get_run(job, slot)
    assert found is not None
    return found


class CountingStore(DelegatingStore):
    """A real store wrapped to count the calls the dashboard makes, by operation."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: "collections.Counter[str]" = collections.Counter()
        self.recent: List[List[str]] = []

    def reset(self) -> None:
        """Forget the calls counted so far."""
        self.calls.clear()
        self.recent.clear()

    def now_ms(self) -> int:
        self.calls["now_ms"] += 1
        return super().now_ms()

    def _jobs(self) -> List[str]:
        self.calls["jobs"] += 1
        return super()._jobs()

    def _job_states(self) -> List[JobState]:
        self.calls["job_states"] += 1
        return super()._job_states()

    def _job_state(self, job: str) -> JobState:
        self.calls["job_state"] += 1
        return super()._job_state(job)

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        self.calls["recent_runs"] += 1
        self.recent.append(list(jobs))
        return super()._recent_runs(jobs, limit)

    def _runs(self, job: str, limit: int) -> List[Run]:
        self.calls["runs"] += 1
        return super()._runs(job, limit)

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        self.calls["get_run"] += 1
        return super()._get_run(job, slot_ms)

    def _unfinished(self, job: str) -> List[Run]:
        self.calls["unfinished"] += 1
        return super()._unfinished(job)

    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        self.calls["stored_schedule"] += 1
        return super()._stored_schedule(job)

    def _schedule_changes(self, since: int) -> ScheduleChanges:
        self.calls["schedule_changes"] += 1
        return super()._schedule_changes(since)

    def _instances(self) -> List[LiveInstance]:
        self.calls["instances"] += 1
        return super()._instances()


def many_jobs(store: Store, count: int, runner: str = "bulk") -> List[str]:
    """``count`` jobs with one successful run each, made with one claim_many and a finish each."""
    now = store.now_ms()
    names = [f"job-{i:05d}" for i in range(count)]
    claims = store.claim_many([ClaimRequest(name, now, runner, max_late_ms=LATE_MS) for name in names])
    for name, answer in zip(names, claims):
        assert answer.won and answer.run is not None
        assert store.finish(name, now, answer.run.token, "success")
    return names


