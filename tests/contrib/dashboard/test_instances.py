"""Instances in the store on the dashboard, on memory, SQLite and Redis: the Instances page and
``GET /api/instances`` list the live instances and what each registers; the jobs pages and
``/api/jobs`` show the code's schedules from their announcements (without the app), list a job
that only a live instance registers, and flag a job whose instances disagree; a stopped instance
disappears. The instances are real started ``LeaseCron`` instances with a short poll (their
first poll announces them), or ``store.announce`` where the content must be fixed."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest
from flask.testing import FlaskClient

import leasecron
from leasecron import LeaseCron, Store
from leasecron.announcements import announcement_of
from leasecron.schedules import make_schedule
from tests.conftest import BACKENDS, Backend
from tests.contrib.dashboard.conftest import PREFIX, client, get_page, simple_run
from tests.contrib.dashboard.html import Node
from tests.helpers import wait_for
from tests.test_cli_instances import noop

#: The instances' poll, in ms: the first poll announces them.
POLL_MS = 100
REPORT = "0 9 * * 1-5"
BERLIN = "Europe/Berlin"


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of each kind in turn (Redis on the test server, in a namespace of this test's own)."""
    backend: Backend = BACKENDS[request.param](tmp_path)
    yield backend.open()
    backend.close()


def start(crons: List[LeaseCron], store: Store, runner: str, report: str = REPORT) -> LeaseCron:
    """An instance ``runner`` with the code job ``report`` on ``report`` (Berlin), ``tick`` every
    hour and the task ``send``, started, and announced in ``store``."""
    cron = LeaseCron(store, runner=runner, poll_ms=POLL_MS, catch_up_ms=0)
    cron.add_job(noop, report, name="report", tz=BERLIN)
    cron.add_job(noop, 3600, name="tick")
    cron.task("send")(noop)
    cron.start()
    crons.append(cron)
    wait_for(lambda: runner in runners(store), 10, message=f"{runner} did not announce itself")
    return cron


def runners(store: Store) -> List[str]:
    """The runners of the live instances, as the store lists them."""
    return [instance.runner for instance in store.instances()]


def instance_rows(http: FlaskClient) -> Dict[str, Node]:
    """The Instances page's rows, by runner."""
    page = get_page(http, f"{PREFIX}/instances")
    return {row.attrs["data-runner"]: row for row in page.find_all("tr", "instance")}


def job_row(http: FlaskClient, job: str) -> Node:
    """The jobs page's row of ``job``."""
    return get_page(http, f"{PREFIX}/").find("table", id="jobs").find("tr", "job", data_job=job)


def api_jobs(http: FlaskClient) -> Dict[str, Dict[str, Any]]:
    """What ``GET /api/jobs`` gives, by job."""
    return {job["job"]: job for job in http.get(f"{PREFIX}/api/jobs").get_json()["jobs"]}


def uses(node: Node) -> List[Tuple[str, str, str, str]]:
    """The schedules in use that a page lists under ``node``: (schedule, tz, text, runners)."""
    return [
        (li.attrs["data-schedule"], li.attrs["data-tz"], li.find("span", "schedule").text,
         li.find("span", "runners").text)
        for li in node.find("ul", "in-use").find_all("li", "use")
    ]  # fmt: skip


def test_instances_page_and_api_list_each_live_instance_and_what_it_registers(
    store: Store, started: List[LeaseCron]
) -> None:
    http = client(store)
    empty = get_page(http, f"{PREFIX}/instances")
    assert empty.find("p", "empty").text.startswith("No live instance: none has announced itself in the last 30.0 s")
    assert http.get(f"{PREFIX}/api/instances").get_json()["instances"] == []
    start(started, store, "web-1")
    start(started, store, "web-2")

    rows = instance_rows(http)
    assert sorted(rows) == ["web-1", "web-2"]
    live = {instance.runner: instance for instance in store.instances()}
    for runner, row in rows.items():
        cells = {cls: row.find("td", cls).text for cls in ("runner", "host", "pid", "version")}
        assert cells == {"runner": runner, "host": socket.gethostname(), "pid": str(os.getpid()),
                         "version": leasecron.__version__}  # fmt: skip
        assert row.find("td", "started").find("time").attrs["data-ms"] == str(live[runner].started_ms)
        assert row.find("td", "seen").text.endswith(" ago")
        jobs = {li.attrs["data-job"]: li.find("span", "schedule") for li in row.find_all("li", "job")}
        assert {name: span.text for name, span in jobs.items()} == {
            "report": f"{REPORT} ({BERLIN})", "tick": "every 1h 00m"}
        assert (jobs["report"].attrs["data-schedule"], jobs["report"].attrs["data-tz"]) == (REPORT, BERLIN)
        assert [li.attrs["data-task"] for li in row.find_all("li", "task")] == ["send"]
    link = rows["web-1"].find("li", "job", data_job="report").find("a").attrs["href"]
    assert get_page(http, link).find("h1", "job-name").text == "report"

    answer = http.get(f"{PREFIX}/api/instances").get_json()
    assert set(answer) == {"now_ms", "instances"}
    assert [i["runner"] for i in answer["instances"]] == ["web-1", "web-2"]  # oldest start first
    first = answer["instances"][0]
    assert first["jobs"] == [{"name": "report", "schedule": REPORT, "tz": BERLIN},
                             {"name": "tick", "schedule": "3600", "tz": "UTC"}]  # fmt: skip
    assert (first["tasks"], first["pid"], first["host"], first["version"]) == (
        ["send"], os.getpid(), socket.gethostname(), leasecron.__version__)
    assert first["started_ms"] == live["web-1"].started_ms <= first["seen_ms"] <= answer["now_ms"]

    started.pop(0).stop(timeout=2)  # a stopped instance withdraws its announcement at once
    assert sorted(instance_rows(http)) == ["web-2"]
    assert [i["runner"] for i in http.get(f"{PREFIX}/api/instances").get_json()["instances"]] == ["web-2"]
    assert get_page(http, f"{PREFIX}/instances").find("small", "count").text == "1 live"


def test_jobs_pages_show_the_announced_schedules_and_flag_instances_that_disagree(
    store: Store, started: List[LeaseCron]
) -> None:
    """Without the app, a job that only live instances register is listed with the schedule of
    their code and its next slot, source ``code``; when they disagree, the jobs page and the job's
    page flag it with every schedule in use and the instances that use it, and the API gives
    ``in_use`` as ``leasecron jobs --json`` does; once they agree again, the flag goes."""
    http = client(store)
    start(started, store, "web-1")
    now = store.now_ms()
    report = job_row(http, "report")
    cell = report.find("td", "schedule")
    assert cell.text == f"{REPORT} ({BERLIN})"
    assert (cell.attrs["data-source"], cell.attrs["data-tz"]) == ("code", BERLIN)
    assert not cell.find_all("span", "disagree")
    next_ms = int(report.find("td", "next").find("time").attrs["data-ms"])
    assert next_ms == make_schedule(REPORT, BERLIN).next_after(now)
    assert job_row(http, "tick").find("td", "schedule").text == "every 1h 00m"
    listed = api_jobs(http)
    report_job = listed["report"]
    assert (report_job["source"], report_job["tz"], report_job["registered"]) == ("code", BERLIN, False)
    assert listed["report"]["in_use"] == [{"schedule": REPORT, "tz": BERLIN, "runners": ["web-1"]}]
    assert listed["report"]["next_slot_ms"] == next_ms
    alone = get_page(http, f"{PREFIX}/jobs/report")
    assert not alone.find_all("div", "disagree")
    assert uses(alone.find("div", "in-code")) == [(REPORT, BERLIN, f"{REPORT} ({BERLIN})", "web-1")]

    start(started, store, "web-2", report="30 9 * * 1-5")  # a rolling deploy: web-2 runs a new schedule
    start(started, store, "web-3")
    expected = [(REPORT, BERLIN, f"{REPORT} ({BERLIN})", "web-1, web-3"),
                ("30 9 * * 1-5", BERLIN, f"30 9 * * 1-5 ({BERLIN})", "web-2")]  # fmt: skip
    cell = job_row(http, "report").find("td", "schedule")
    assert cell.find("span", "disagree").text == "instances disagree"
    assert cell.text.startswith(f"{REPORT} ({BERLIN}) instances disagree")  # the most instances' schedule
    assert uses(cell) == expected
    assert not job_row(http, "tick").find("td", "schedule").find_all("span", "disagree")
    page = get_page(http, f"{PREFIX}/jobs/report")
    flag = page.find("div", "disagree")
    assert flag.text.startswith("The live instances disagree on its schedule")
    assert uses(flag) == expected
    assert page.find("p", "about").find("span", "schedule").text == f"{REPORT} ({BERLIN})"
    listed = api_jobs(http)
    assert listed["report"]["in_use"] == [
        {"schedule": REPORT, "tz": BERLIN, "runners": ["web-1", "web-3"]},
        {"schedule": "30 9 * * 1-5", "tz": BERLIN, "runners": ["web-2"]},
    ]
    assert listed["report"]["source"] == "code" and listed["report"]["schedule"] == f"{REPORT} ({BERLIN})"
    assert listed["tick"]["in_use"] == [{"schedule": "3600", "tz": "UTC", "runners": ["web-1", "web-2", "web-3"]}]
    runs = http.get(f"{PREFIX}/api/jobs/report/runs").get_json()
    assert runs["runs"] == []

    started.pop(1).stop(timeout=2)  # web-2 stops: the instances agree again
    assert not job_row(http, "report").find("td", "schedule").find_all("span", "disagree")
    assert not get_page(http, f"{PREFIX}/jobs/report").find_all("div", "disagree")
    assert api_jobs(http)["report"]["in_use"] == [{"schedule": REPORT, "tz": BERLIN, "runners": ["web-1", "web-3"]}]


def announce(store: Store, runner: str, jobs: Sequence[Tuple[str, str, str]], tasks: Sequence[str] = ()) -> None:
    """Announce ``runner`` with fixed ``jobs`` ((name, schedule, tz)) and ``tasks``."""
    store.announce(announcement_of(runner, "host-a", 4242, "0.3.0", jobs, list(tasks)))


def test_the_stored_schedules_read_with_the_announced_code(store: Store) -> None:
    """An override without a zone is read in the zone the instances' code gives the job; a stored
    job under a name that live instances register in code leaves the code's job shown (as it
    runs); a zone this host does not know shows the announced text with no next slot."""
    announce(store, "web-1", [("report", REPORT, BERLIN), ("team-3", "60", "UTC"), ("far", "0 9 * * *", "Mars/Base")])
    store.set_schedule("report", by="ops", schedule="*/5 * * * *")
    store.set_schedule("team-3", by="ops", schedule="0 9 * * *", task="send")
    simple_run(store, "other")
    http = client(store)
    listed = api_jobs(http)
    assert (listed["report"]["schedule"], listed["report"]["source"], listed["report"]["tz"]) == (
        f"*/5 * * * * ({BERLIN})", "override", None)
    assert listed["report"]["next_slot_ms"] % 300_000 == 0
    assert (listed["team-3"]["schedule"], listed["team-3"]["source"], listed["team-3"]["tz"]) == (
        "every 1m 00s", "code", "UTC")
    assert (listed["far"]["schedule"], listed["far"]["next_slot_ms"], listed["far"]["source"]) == (
        "0 9 * * *", None, "code")
    assert (listed["other"]["schedule"], listed["other"]["source"], listed["other"]["in_use"]) == (None, None, [])
    assert job_row(http, "other").find("td", "schedule").text == "-"
    assert get_page(http, f"{PREFIX}/jobs/other").find("p", "about").text.startswith("No schedule known")
    far = instance_rows(http)["web-1"].find("li", "job", data_job="far").find("span", "schedule")
    assert far.text == "0 9 * * * (Mars/Base)"


def test_read_only_dashboards_show_instances_and_names_are_escaped(store: Store) -> None:
    """The Instances page and its API are reads: a read-only dashboard serves them; what an
    instance announces comes back escaped, never as markup."""
    hostile = "<script>alert(1)</script>"
    announce(store, hostile, [(hostile, "60", "UTC")], ["<b>bold</b>"])
    http = client(store, read_only=True)
    response = http.get(f"{PREFIX}/instances")
    assert response.status_code == 200 and "<script>alert" not in response.get_data(as_text=True)
    row = instance_rows(http)[hostile]
    assert row.find("td", "runner").text == hostile
    assert row.find("li", "task").attrs["data-task"] == "<b>bold</b>"
    assert not row.find_all("b")
    assert [i["runner"] for i in http.get(f"{PREFIX}/api/instances").get_json()["instances"]] == [hostile]
    nav = get_page(http, f"{PREFIX}/").find("nav", "main")
    assert nav.find("a", "nav-instances").attrs["href"] == f"{PREFIX}/instances"
    assert get_page(http, f"{PREFIX}/jobs/x").find("nav", "main").find("a", "nav-instances")
    basic = client(store, password="pw")
    assert basic.get(f"{PREFIX}/instances").status_code == 401
    assert basic.get(f"{PREFIX}/api/instances").status_code == 401
