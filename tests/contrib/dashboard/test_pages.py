"""The dashboard's pages over real stores (memory, SQLite file): every job, one job, one run.

Runs are made through the store's operations (see ``conftest.history``); the
pages are read as a browser reads them (parsed), and links are followed
rather than built, so that what a user clicks is what is tested.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from leasecron import LeaseCron, MemoryStore, Store
from leasecron.runs import Run
from tests.contrib.dashboard.conftest import (
    ERROR_TEXT,
    PREFIX,
    CountingStore,
    claim,
    client,
    get_page,
    history,
    many_jobs,
    simple_run,
)
from tests.contrib.dashboard.html import Node

KINDS_NEWEST_FIRST = ["running", "handed-over", "chain", "interrupted", "failed", "success"]
MARK_OF = {"running": "running", "handed-over": "handed-over", "chain": "success", "interrupted": "interrupted",
           "failed": "failed", "success": "success"}


def row(page: Node, job: str) -> Node:
    """The jobs table's row of ``job``."""
    return page.find("table", id="jobs").find("tr", "job", data_job=job)


def check_time(node: Node, ms: int) -> None:
    """``node`` is the <time> of ``ms``: ISO datetime in UTC, epoch ms, UTC text and title."""
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    text = moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{ms % 1000:03d}" if ms % 1000 else "")
    assert node.tag == "time"
    assert node.attrs["data-ms"] == str(ms)
    assert node.attrs["datetime"] == text.replace(" ", "T") + "Z"
    assert node.attrs["title"] == f"{text} UTC"
    assert node.text == f"{text} UTC"


def test_jobs_page_shows_marks_live_runs_and_pauses(store: Store) -> None:
    """Each job has a row: its last runs as marks newest first (handed-over included), its live run
    with the lease left, and, when paused, who paused it, when and why."""
    slots = history(store, "etl")
    simple_run(store, "report")
    paused = store.pause("report", by="ops@host", note="disk full <b>")
    http = client(store)
    page = get_page(http, f"{PREFIX}/")
    assert page.find("body").attrs["data-refresh-ms"] == "2000"
    main = page.find("main", id="content")
    assert [r.attrs["data-job"] for r in main.find_all("tr", "job")] == ["etl", "report"]

    etl = row(page, "etl")
    assert "paused" not in etl.classes and etl.find("td", "pause").text == ""
    marks = etl.find("td", "marks").find_all("a", "mark")
    assert [m.attrs["data-slot"] for m in marks] == [str(slots[kind]) for kind in KINDS_NEWEST_FIRST]
    assert [m.classes[1] for m in marks] == [f"mark-{MARK_OF[kind]}" for kind in KINDS_NEWEST_FIRST]
    assert marks[0].attrs["title"].startswith("running, ") and marks[0].attrs["title"].endswith(", web-3")
    (live,) = etl.find("td", "live").find_all("span", "live-run")
    assert live.attrs["data-slot"] == str(slots["running"])
    assert 0 < int(live.attrs["data-lease-left-ms"]) <= 60_000
    assert live.text.endswith(" s left"), live.text

    report = row(page, "report")
    assert "paused" in report.classes
    pause = report.find("td", "pause")
    assert pause.text.startswith("paused by ops@host ")
    assert pause.find("span", "note").text == "disk full <b>"
    assert paused.paused_ms is not None
    check_time(pause.find("time"), paused.paused_ms)
    assert report.find("td", "schedule").text == "-"

    # each mark leads to its run's page
    for mark in marks:
        run_page = get_page(http, mark.attrs["href"])
        assert run_page.find("dd", "field-slot_ms").text.startswith(mark.attrs["data-slot"])


def test_jobs_page_with_the_apps_cron_shows_schedules_and_next_slots(store: Store) -> None:
    """With ``cron``, a registered job shows its schedule and next slot (also one that never ran);
    a job of the store that the app does not register says so."""
    cron = LeaseCron(store, runner="web-1")
    cron.add_job(lambda: None, "*/5 * * * *", name="five")
    simple_run(store, "other")
    page = get_page(client(store, cron=cron), f"{PREFIX}/")
    now_ms = int(page.find("p", "now").find("time").attrs["data-ms"])
    five = row(page, "five")
    assert five.find("td", "schedule").text == "*/5 * * * *"
    check_time(five.find("td", "next").find("time"), cron.jobs["five"].schedule.next_after(now_ms))
    assert five.find("td", "marks").text == "no runs"
    assert row(page, "other").find("td", "schedule").text == "(not in app)"


def test_pages_and_search_split_the_jobs(store: Store) -> None:
    """``per_page`` cuts the sorted jobs into pages linked by ``nav.pages``; ``q`` keeps the names
    that contain it; bad numbers are a 400 naming the argument."""
    names = many_jobs(store, 120)
    http = client(store)
    first = get_page(http, f"{PREFIX}/")
    assert [r.attrs["data-job"] for r in first.find_all("tr", "job")] == names[:50]
    links = first.find("nav", "pages").find_all("a", "page")
    assert [a.text for a in links] == ["1", "2", "3", "next ›"]
    second = get_page(http, links[-1].attrs["href"])
    assert [r.attrs["data-job"] for r in second.find_all("tr", "job")] == names[50:100]
    third = get_page(http, second.find("nav", "pages").find("a", "page", rel="next").attrs["href"])
    assert [r.attrs["data-job"] for r in third.find_all("tr", "job")] == names[100:]
    assert third.find_all("a", "page", rel="next") == []

    small = get_page(http, f"{PREFIX}/?per_page=7&q=JOB-0011")
    assert [r.attrs["data-job"] for r in small.find_all("tr", "job")] == names[110:117]
    onward = small.find("nav", "pages").find("a", "page", rel="next").attrs["href"]
    assert [r.attrs["data-job"] for r in get_page(http, onward).find_all("tr", "job")] == names[117:120]
    assert get_page(http, f"{PREFIX}/?q=nothing-like-it").find("p", "empty").text.startswith("No job's name")
    for bad in ("per_page=0", "per_page=501", "page=0", "page=abc", "per_page=-1"):
        error = get_page(http, f"{PREFIX}/?{bad}", status=400)
        assert bad.split("=")[0] in error.find("p", "error-message").text


def test_a_page_of_10000_jobs_takes_six_store_calls() -> None:
    """A jobs page is now_ms, jobs, job_states, schedule_changes (every stored schedule), instances
    (the live instances' announcements) and one recent_runs for the jobs on it, whatever the
    number of jobs (10,000 here); so is the API's; a job's page is five calls, the instances page
    two."""
    inner = MemoryStore()
    names = many_jobs(inner, 10_000)
    store = CountingStore(inner)
    http = client(store)
    expected = {"now_ms": 1, "jobs": 1, "job_states": 1, "schedule_changes": 1, "instances": 1, "recent_runs": 1}
    for url, page_names in [
        (f"{PREFIX}/", names[:50]),
        (f"{PREFIX}/?page=200", names[9950:]),
        (f"{PREFIX}/?per_page=500&page=3", names[1000:1500]),
        (f"{PREFIX}/?q=job-0999", names[9990:]),
    ]:
        store.reset()
        page = get_page(http, url)
        assert dict(store.calls) == expected, url
        assert store.recent == [page_names]
        assert [r.attrs["data-job"] for r in page.find_all("tr", "job")] == page_names
        assert all(len(r.find_all("a", "mark-success")) == 1 for r in page.find_all("tr", "job"))
    store.reset()
    assert http.get(f"{PREFIX}/api/jobs?page=7").status_code == 200
    assert dict(store.calls) == expected and store.recent == [names[300:350]]
    store.reset()
    get_page(http, f"{PREFIX}/jobs/job-00042")
    assert dict(store.calls) == {"now_ms": 1, "job_state": 1, "stored_schedule": 1, "instances": 1, "runs": 1}
    store.reset()
    get_page(http, f"{PREFIX}/instances")
    assert dict(store.calls) == {"now_ms": 1, "instances": 1}


def test_job_page_shows_runs_with_attempt_timelines_filters_and_requests(store: Store) -> None:
    """A job's page (reached by its link): every run newest first with its attempts as a timeline
    (the chain expired → success included), its pending manual runs, and status filters."""
    slots = history(store, "etl")
    request = store.request_run("etl", by="ops@host")
    http = client(store)
    link = row(get_page(http, f"{PREFIX}/"), "etl").find("td", "name").find("a")
    page = get_page(http, link.attrs["href"])
    assert page.find("h1", "job-name").text == "etl"
    sections = page.find_all("section", "run")
    assert [s.attrs["data-slot"] for s in sections] == [str(slots[kind]) for kind in KINDS_NEWEST_FIRST]
    statuses = [s.attrs["data-status"] for s in sections]
    assert statuses == ["running", "running", "success", "interrupted", "failed", "success"]

    chain = page.find("section", "run", data_slot=str(slots["chain"])).find("ol", "timeline")
    attempts = chain.find_all("li", "attempt")
    assert [(a.classes[1], a.attrs["data-number"], a.attrs["data-runner"]) for a in attempts] == [
        ("attempt-expired", "1", "web-1"),
        ("attempt-success", "2", "web-2"),
    ]
    first_bar, second_bar = (a.find("rect") for a in attempts)
    assert float(first_bar.attrs["x"]) == 0 and float(second_bar.attrs["x"]) >= float(first_bar.attrs["width"]) - 1
    assert all(0 < float(bar.attrs["width"]) <= 100 for bar in (first_bar, second_bar))
    handed = page.find("section", "run", data_slot=str(slots["handed-over"]))
    assert handed.find("span", "status").text == "handed-over"
    assert [a.classes[1] for a in handed.find_all("li", "attempt")] == ["attempt-handed_over"]
    assert [a.classes[1] for a in page.find("section", "run", data_slot=str(slots["interrupted"]))
            .find_all("li", "attempt")] == ["attempt-expired"]

    (pending,) = page.find("ul", "requests").find_all("li")
    assert pending.attrs["data-slot"] == str(request.slot_ms) and "by ops@host" in pending.text

    filters = {a.attrs["data-status"]: a.attrs["href"] for a in page.find("nav", "filters").find_all("a", "filter")}
    assert sorted(filters) == ["all", "failed", "interrupted", "running", "success"]
    for status, count in [("success", 2), ("failed", 1), ("interrupted", 1), ("running", 2), ("all", 6)]:
        found = get_page(http, filters[status]).find_all("section", "run")
        assert len(found) == count, status
        assert status == "all" or {s.attrs["data-status"] for s in found} == {status}
    assert len(get_page(http, f"{link.attrs['href']}?limit=2").find_all("section", "run")) == 2
    error = get_page(http, f"{link.attrs['href']}?status=bogus", status=400)
    assert "status" in error.find("p", "error-message").text

    store.pause("etl", by="ops@host", note="why not")
    paused = get_page(http, link.attrs["href"])
    assert paused.find("p", "pause").find("span", "note").text == "why not"
    assert paused.find_all("form", "resume") and not paused.find_all("form", "pause")


def test_run_page_shows_every_field_and_attempt_and_errors_in_full(store: Store) -> None:
    """A run's page lists every field of the run and every attempt, and its errors whole."""
    slots = history(store, "etl")
    http = client(store)
    job_page = get_page(http, f"{PREFIX}/jobs/etl")
    failed_link = job_page.find("section", "run", data_slot=str(slots["failed"])).find("h3").find("a")
    page = get_page(http, failed_link.attrs["href"])
    fields = page.find("dl", "run-fields")
    names = [dt.text for dt in fields.find_all("dt")]
    assert names[:-1] == [f.name for f in dataclasses.fields(Run) if f.name != "attempts"]
    assert fields.find("pre", "error").raw_text == ERROR_TEXT
    run = store.get_run("etl", slots["failed"])
    assert run is not None
    assert fields.find("dd", "field-runner").text == run.runner == "web-2"
    assert fields.find("dd", "field-status").text == "failed"
    (attempt,) = page.find("table", "attempts").find_all("tr", "attempt")
    assert attempt.classes[1] == "attempt-failed" and attempt.find("pre", "error").raw_text == ERROR_TEXT
    assert page.find_all("b") == [] and page.find_all("i") == []  # the error's tags stayed text

    chain = get_page(http, f"{PREFIX}/jobs/etl/runs/{slots['chain']}")
    rows = chain.find("table", "attempts").find_all("tr", "attempt")
    assert [(r.classes[1], r.attrs["data-runner"]) for r in rows] == [
        ("attempt-expired", "web-1"),
        ("attempt-success", "web-2"),
    ]
    running = get_page(http, f"{PREFIX}/jobs/etl/runs/{slots['running']}")
    assert running.find("dd", "field-lease-left").text.endswith(" s")
    missing = get_page(http, f"{PREFIX}/jobs/etl/runs/{slots['running'] + 1}", status=404)
    assert "no stored run" in missing.find("p", "error-message").text


def test_forms_pause_resume_and_trigger_then_come_back_with_a_message(store: Store) -> None:
    """The forms of a page (with their CSRF token) pause with a note, resume and trigger, recorded
    as done by dashboard@host, and come back to the page they were sent from with a flash."""
    import socket

    simple_run(store, "etl")
    http = client(store)
    page = get_page(http, f"{PREFIX}/")
    form = row(page, "etl").find("form", "pause")
    data = {i.attrs["name"]: i.attrs.get("value", "") for i in form.find_all("input")}
    assert form.attrs["method"] == "post" and form.find("button").text == "Pause"
    assert data["next"] == f"{PREFIX}/" and data["csrf_token"]
    response = http.post(form.attrs["action"], data={**data, "note": "deploy <now> & later"})
    assert response.status_code == 303 and response.headers["Location"] == f"{PREFIX}/"
    state = store.job_state("etl")
    assert state.paused and state.note == "deploy <now> & later"
    assert state.paused_by == f"dashboard@{socket.gethostname()}"
    after = get_page(http, response.headers["Location"])
    flash = after.find("p", "flash").text
    assert "Paused job 'etl'" in flash and "deploy <now> & later" in flash
    assert "paused" in row(after, "etl").classes
    assert get_page(http, f"{PREFIX}/").find_all("p", "flash") == []  # shown once

    job_page = get_page(http, f"{PREFIX}/jobs/etl")
    resume = job_page.find("form", "resume")
    assert resume.find("button").text == "Resume"
    data = {i.attrs["name"]: i.attrs.get("value", "") for i in resume.find_all("input")}
    response = http.post(resume.attrs["action"], data=data)
    assert response.status_code == 303 and response.headers["Location"] == f"{PREFIX}/jobs/etl"
    assert not store.job_state("etl").paused
    assert "Resumed job 'etl'" in get_page(http, response.headers["Location"]).find("p", "flash").text

    trigger = get_page(http, f"{PREFIX}/jobs/etl").find("form", "trigger")
    assert trigger.find("button").text == "Trigger now"
    data = {i.attrs["name"]: i.attrs.get("value", "") for i in trigger.find_all("input")}
    response = http.post(trigger.attrs["action"], data=data)
    assert response.status_code == 303
    (request,) = store.job_state("etl").pending
    assert request.requested_by == f"dashboard@{socket.gethostname()}"
    shown = get_page(http, response.headers["Location"])
    assert "Requested a manual run of 'etl'" in shown.find("p", "flash").text
    assert shown.find("ul", "requests").find("li").attrs["data-slot"] == str(request.slot_ms)


def test_a_store_that_fails_is_a_503_page_naming_the_failure() -> None:
    """A store that cannot be reached: the page says so (503), without the URL's password."""
    import leasecron

    store = leasecron.open_store("redis://:s3cret@127.0.0.1:1/0?prefix=down&socket_timeout=0.2")
    try:
        http = client(store)
        for url in (f"{PREFIX}/", f"{PREFIX}/jobs/etl", f"{PREFIX}/jobs/etl/runs/5"):
            response = http.get(url)
            assert response.status_code == 503
            text = response.get_data(as_text=True)
            assert "StoreUnavailable" in text and "s3cret" not in text
        api = http.get(f"{PREFIX}/api/jobs")
        assert api.status_code == 503 and "s3cret" not in api.get_data(as_text=True)
        assert "StoreUnavailable" in api.get_json()["error"]
    finally:
        store.close()


def test_live_lease_left_counts_from_the_stores_clock(store: Store) -> None:
    """The lease left is the store's lease end minus the store's clock at the read."""
    run = claim(store, "live", store.now_ms(), "web-9", lease_ms=30_000)
    page = get_page(client(store), f"{PREFIX}/")
    now_ms = int(page.find("p", "now").find("time").attrs["data-ms"])
    (live,) = row(page, "live").find_all("span", "live-run")
    assert int(live.attrs["data-lease-left-ms"]) == run.lease_end_ms - now_ms


def test_templates_and_static_files_are_package_data() -> None:
    """setup.cfg's package data of the dashboard names every template and static file, so that
    a wheel holds them (and the ``dashboard`` extra brings Flask)."""
    import configparser
    from pathlib import Path

    import leasecron.contrib.dashboard as dashboard

    root = Path(dashboard.__file__).parent
    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parents[3] / "setup.cfg")
    patterns = config["options.package_data"]["leasecron.contrib.dashboard"].split(",")
    covered = {path for pattern in patterns for path in root.glob(pattern.strip())}
    files = {path for folder in ("templates", "static") for path in (root / folder).rglob("*") if path.is_file()}
    assert files and files == covered
    names = {path.name for path in files}
    assert {"base.html", "jobs.html", "job.html", "run.html", "dashboard.js", "dashboard.css"} <= names
    assert config["options.extras_require"]["dashboard"].strip().startswith("flask")
