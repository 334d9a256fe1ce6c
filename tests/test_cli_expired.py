"""A request for a manual run that expired unclaimed, as ``leasecron jobs`` and the dashboard show
it (when it expired, who asked) until the job's next run starts: on every store, and the rule
itself (:func:`leasecron.jobs.expired_request`) on plain values.

A request expires ``max_late_ms + 10 s`` after it was made, on the store's clock. The memory
store's clock is driven (moved on past the expiry, no waiting); the other stores' clocks are their
servers' (or this host's), so their requests are made on every store selected at once, by the
first copy of the test that runs (:class:`Expiring`): the 10 s pass once for the module, not once
per store.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from contextlib import closing
from typing import Dict, Iterator, List, Optional, Union

import pytest
from flask import Flask

from leasecron import MemoryStore, Store
from leasecron.cli.commands import jobs_output
from leasecron.contrib.dashboard import blueprint
from leasecron.controls import JobState, ManualRequest
from leasecron.formatting import utc_time
from leasecron.jobs import expired_request
from leasecron.runs import LATE_TOLERANCE_MS, Attempt, Run

from .conftest import BACKENDS, Backend, selected_items
from .contrib.dashboard.html import Node, parse
from .helpers import wait_for

#: The job whose request expires after a run: shown, then hidden by its next run.
JOB = "report"
#: A job that never ran: its expired request shows.
QUIET = "quiet"
#: A job whose request is still pending (10 minutes to go): not shown as expired.
WAITING = "waiting"
TEST = "test_jobs_and_the_dashboard_show_an_expired_request_until_the_next_run"


class DrivenClock:
    """A memory store's clock: this host's, plus an offset a test moves on."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


@dataclasses.dataclass
class Made:
    """What :func:`make` stored: the run of :data:`JOB` before its request, and the requests."""

    store: Store
    url: Optional[str]
    before: Run
    expired: ManualRequest
    quiet: ManualRequest
    waiting: ManualRequest
    clock: Optional[DrivenClock] = None


def make(store: Store, url: Optional[str]) -> Made:
    """A finished run of :data:`JOB`, then a request of it and of :data:`QUIET` that expire 10 s on
    (no instance runs), and one of :data:`WAITING` that stays pending."""
    claimed = store.claim(JOB, store.now_ms() - 1_000, runner="web-1", lease_ms=60_000).run
    assert claimed is not None
    assert store.finish(JOB, claimed.slot_ms, claimed.token, "success")
    before = store.get_run(JOB, claimed.slot_ms)
    assert before is not None
    expired = store.request_run(JOB, by="alice@ops", max_late_ms=0)
    quiet = store.request_run(QUIET, by="bob@ops", max_late_ms=0)
    waiting = store.request_run(WAITING, by="carol@ops", max_late_ms=600_000)
    return Made(store, url, before, expired, quiet, waiting)


class Expiring:
    """The requests of every copy of :data:`TEST` selected in this session, made at once."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._request = request
        self._tmp_path_factory = tmp_path_factory
        self._backends: List[Backend] = []
        self._made: Optional[Dict[str, Union[Made, BaseException]]] = None

    def _make(self, name: str) -> Union[Made, BaseException]:
        try:
            if name == "memory":  # its clock is driven: nothing to wait for
                clock = DrivenClock()
                made = make(MemoryStore(clock=clock), None)
                made.clock = clock
                return made
            backend = BACKENDS[name](self._tmp_path_factory.mktemp(f"expiring-{name}"))
            self._backends.append(backend)
            return make(backend.open(), backend.url())
        except (Exception, pytest.fail.Exception, pytest.skip.Exception) as exc:  # raised in its own copy
            return exc

    def of(self, name: str) -> Made:
        """What was made on backend ``name`` (on every selected one, the first time)."""
        if self._made is None:
            self._made = {}
            for item in selected_items(self._request, TEST):
                self._made[item.callspec.params["backend"]] = self._make(item.callspec.params["backend"])
        if name not in self._made:
            self._made[name] = self._make(name)
        made = self._made[name]
        if isinstance(made, BaseException):
            raise made
        return made

    def close(self) -> None:
        """Close every store made, and clear its namespace."""
        for backend in self._backends:
            backend.close()


@pytest.fixture(scope="module")
def expiring(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Expiring]:
    """The module's :class:`Expiring`; its stores are closed at the end of the module."""
    with closing(Expiring(request, tmp_path_factory)) as made:
        yield made


def shown(store: Store) -> Dict[str, object]:
    """Each job's ``expired_request`` in ``leasecron jobs --json``."""
    return {row["job"]: row["expired_request"] for row in json.loads(jobs_output(store, None, True)[0])}


def expired_line(job: str, request: ManualRequest) -> str:
    """The start of the line ``leasecron jobs`` prints of ``job``'s expired request (the time ago follows)."""
    return (f"  {job}  request by {request.requested_by} expired unclaimed at {utc_time(request.expires_ms)} UTC (")


def dashboard(store: Store) -> Flask:
    """An app with the dashboard of ``store`` under ``/cron``."""
    app = Flask("expired-test", static_folder=None)
    app.register_blueprint(blueprint(store), url_prefix="/cron")
    return app


def page(app: Flask, path: str) -> Node:
    """The dashboard page at ``path``, parsed."""
    answer = app.test_client().get(path)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return parse(answer.get_data(as_text=True))


def api_shown(app: Flask) -> Dict[str, object]:
    """Each job's ``expired_request`` in ``GET /api/jobs``."""
    return {job["job"]: job["expired_request"] for job in app.test_client().get("/cron/api/jobs").get_json()["jobs"]}


def badge(jobs_page: Node, job: str) -> List[Node]:
    """The expired request shown in ``job``'s row of the jobs page (none: an empty list)."""
    return jobs_page.find("tr", "job", data_job=job).find_all("span", "expired-request")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_jobs_and_the_dashboard_show_an_expired_request_until_the_next_run(backend: str, expiring: Expiring) -> None:
    """Once a request expired unclaimed, `leasecron jobs` (a line under the table: who asked, when it
    expired; `--json`: ``expired_request``), the jobs page, the job's page and ``/api/jobs`` show it,
    also after an earlier run and for a job that never ran, but not a pending request; once the
    job's next run starts, it is shown no more (the job's page filtered by status alike)."""
    made = expiring.of(backend)
    store = made.store
    last = max(made.expired.expires_ms, made.quiet.expires_ms)
    if made.clock is not None:
        made.clock.offset_ms += LATE_TOLERANCE_MS + 500
    wait_for(lambda: store.now_ms() > last, timeout=LATE_TOLERANCE_MS / 1000 + 5, interval=0.05)
    expired = dataclasses.replace(made.expired, state="expired")
    quiet = dataclasses.replace(made.quiet, state="expired")
    assert shown(store) == {JOB: expired.to_dict(), QUIET: quiet.to_dict(), WAITING: None}
    text = "\n".join(jobs_output(store, None, False))
    assert re.search(r"^Expired manual runs \(.*shown until the job's next run\):\n", text, re.M), text
    for job, request in ((JOB, expired), (QUIET, quiet)):
        assert expired_line(job.ljust(len(JOB)), request) in text, text
    assert f"{WAITING}  request by" not in text
    if made.url is not None:  # the command itself, as an operator runs it
        run = subprocess.run([sys.executable, "-m", "leasecron", "jobs", made.url], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert run.returncode == 0 and expired_line(JOB, expired) in run.stdout, run.stdout + run.stderr

    app = dashboard(store)
    jobs_page = page(app, "/cron/")
    [shown_job] = badge(jobs_page, JOB)
    assert shown_job.text.startswith("request by alice@ops expired unclaimed ")
    assert shown_job.find("time").attrs["data-ms"] == str(expired.expires_ms)
    assert [span.find("time").attrs["data-ms"] for span in badge(jobs_page, QUIET)] == [str(quiet.expires_ms)]
    assert badge(jobs_page, WAITING) == []
    about = page(app, f"/cron/jobs/{JOB}").find("p", "expired-request")
    assert "no instance claimed it in time: request by alice@ops expired unclaimed" in about.text
    assert [t.attrs["data-ms"] for t in about.find_all("time")] == [str(expired.slot_ms), str(expired.expires_ms)]
    assert api_shown(app) == {JOB: expired.to_dict(), QUIET: quiet.to_dict(), WAITING: None}

    nxt = store.claim(JOB, store.now_ms(), runner="web-2", lease_ms=60_000)  # the job's next run starts
    assert nxt.won, nxt
    assert shown(store) == {JOB: None, QUIET: quiet.to_dict(), WAITING: None}
    assert "request by alice@ops" not in "\n".join(jobs_output(store, None, False))
    assert badge(page(app, "/cron/"), JOB) == [] and len(badge(page(app, "/cron/"), QUIET)) == 1
    for path in (f"/cron/jobs/{JOB}", f"/cron/jobs/{JOB}?status=success"):
        assert page(app, path).find_all("p", "expired-request") == [], path
    assert api_shown(app) == {JOB: None, QUIET: quiet.to_dict(), WAITING: None}


# -- the rule, on plain values -----------------------------------------------------------------


def request(slot_ms: int, state: str = "expired", by: str = "alice@ops") -> ManualRequest:
    """A request of :data:`JOB` made at ``slot_ms``."""
    return ManualRequest(JOB, slot_ms, by, slot_ms + 10_000, state)


def run(started_ms: int, *later: int) -> Run:
    """A run of :data:`JOB` whose first attempt started at ``started_ms`` (and one more attempt at
    each of ``later``, takeovers)."""
    starts = (started_ms, *later)
    attempts = tuple(Attempt(n, f"w{n}", "schedule" if n == 1 else "takeover", start, None, "running")
                     for n, start in enumerate(starts, 1))  # fmt: skip
    return Run(JOB, started_ms, len(starts), "t", f"w{len(starts)}", "running", starts[-1] + 60_000, False,
               attempts[-1].reason, None, starts[-1], None, attempts)  # fmt: skip


def test_expired_request_is_the_newest_expired_one_made_since_the_last_run_started() -> None:
    """The newest expired request (by its slot) made at or after the start of the newest run's first
    attempt; none without a state or an expired request; pending, claimed and skipped ones never."""
    assert expired_request(None, None) is None
    assert expired_request(JobState(JOB), None) is None
    others = tuple(request(slot, state) for slot, state in ((5, "pending"), (6, "claimed"), (7, "skipped")))
    assert expired_request(JobState(JOB, requests=others), None) is None
    old, new = request(1_000), request(2_000, by="bob@ops")
    state = JobState(JOB, requests=(old, new, *others))
    assert expired_request(state, None) == new  # the job never ran
    assert expired_request(state, run(1_500)) == new
    assert expired_request(state, run(2_000)) == new  # made in the millisecond the run started
    assert expired_request(state, run(2_001)) is None  # the next run started
    assert expired_request(state, run(1_500, 2_500)) == new  # a takeover of the same run is no next run
    assert expired_request(JobState(JOB, requests=(new, old)), run(500)) == new  # the newest by slot
    no_attempts = dataclasses.replace(run(2_001), attempts=())  # a run stored before attempts were recorded
    assert expired_request(state, no_attempts) is None
