"""Schedules as data in the dashboard, on real stores (memory, SQLite file; Redis once): the API's
routes, the pages' forms (with their CSRF token), what the pages show of a stored schedule, and the
refusals (a bad value 400 with the reason, a clash 409, read-only 403), after which the store
holds nothing new."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Dict, List, Tuple
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

from leasecron import LeaseCron, MemoryStore, Store
from leasecron.stored import StoredSchedule
from tests.conftest import BACKENDS
from tests.contrib.dashboard.conftest import HOSTILE, PREFIX, CountingStore, client, get_page, simple_run
from tests.contrib.dashboard.html import Node

BY = f"dashboard@{socket.gethostname()}"
STORED = {"task": "send_report", "schedule": "0 9 * * 1-5", "tz": "Europe/Berlin", "kwargs": {"team": 3},
          "options": {"timeout_ms": 60000, "overlap": "skip"}}  # fmt: skip


def call(http: FlaskClient, method: str, url: str, body: Any = None, status: int = 200) -> Any:
    """Send ``body`` as JSON with ``method``; the answer's JSON (the test fails on another status)."""
    response = http.open(url, method=method, json=body if body is not None else {})
    assert response.status_code == status, (method, url, response.status_code, response.get_data(as_text=True))
    assert response.mimetype == "application/json"
    return response.get_json()


def records(store: Store) -> Dict[str, StoredSchedule]:
    """Every record the store holds of a schedule, by job."""
    return {record.job: record for record in store.schedule_changes(0).changes}


def api_job(http: FlaskClient, name: str) -> Dict[str, Any]:
    """What ``GET /api/jobs`` gives of ``name``."""
    (job,) = [j for j in http.get(f"{PREFIX}/api/jobs?per_page=500").get_json()["jobs"] if j["job"] == name]
    return job  # type: ignore[no-any-return]


def check_schedule_api(store: Store) -> None:
    """Override, reset, put, list, read and delete through the API; the store and /api/jobs agree."""
    simple_run(store, "report")
    http = client(store)
    before = api_job(http, "report")
    assert (before["source"], before["version"], before["tz"], before["stored_schedule"]) == (None, 0, None, None)

    over = call(http, "PUT", f"{PREFIX}/api/jobs/report/schedule", {"schedule": "*/5 * * * *", "tz": "Europe/Berlin"})
    stored = store.stored_schedule("report")
    assert stored is not None and over == stored.to_dict()
    assert (over["source"], over["schedule"], over["tz"], over["version"], over["updated_by"]) == (
        "override", "*/5 * * * *", "Europe/Berlin", 1, BY)
    job = api_job(http, "report")
    assert (job["source"], job["schedule"], job["tz"], job["version"]) == (
        "override", "*/5 * * * * (Europe/Berlin)", "Europe/Berlin", 1)
    assert job["next_slot_ms"] % 300_000 == 0 and job["next_slot_ms"] > job["runs"][0]["slot_ms"]
    assert job["stored_schedule"] == over

    again = call(http, "PUT", f"{PREFIX}/api/jobs/report/schedule", {"schedule": 30})  # an interval, no zone
    assert (again["schedule"], again["tz"], again["version"]) == ("30", None, 2)
    assert api_job(http, "report")["schedule"] == "every 30.0 s"
    reset = call(http, "DELETE", f"{PREFIX}/api/jobs/report/schedule")
    assert (reset["source"], reset["schedule"], reset["version"]) == ("code", None, 3)
    assert call(http, "DELETE", f"{PREFIX}/api/jobs/report/schedule") == reset  # nothing to reset: no write
    assert records(store)["report"].version == 3
    never = call(http, "DELETE", f"{PREFIX}/api/jobs/never/schedule")
    assert (never["version"], never["source"], never["updated_by"]) == (0, "code", None)
    assert "never" not in records(store)

    put = call(http, "PUT", f"{PREFIX}/api/stored-jobs/report-team-3", STORED)
    assert put == {**STORED, "name": "report-team-3", "version": 1, "updated_by": BY,
                   "updated_ms": put["updated_ms"]}  # fmt: skip
    stored_job = store.stored_schedule("report-team-3")
    assert stored_job is not None and stored_job.as_job().to_dict() == put
    assert call(http, "GET", f"{PREFIX}/api/stored-jobs/report-team-3") == put
    assert call(http, "GET", f"{PREFIX}/api/stored-jobs") == {"stored_jobs": [put]}
    listed = api_job(http, "report-team-3")  # listed without runs and without an app
    assert (listed["source"], listed["tz"], listed["version"], listed["runs"]) == ("stored", "Europe/Berlin", 1, [])
    assert listed["schedule"] == "0 9 * * 1-5 (Europe/Berlin)" and listed["next_slot_ms"] is not None
    replaced = call(http, "PUT", f"{PREFIX}/api/stored-jobs/report-team-3", {"task": "t2", "schedule": "1"})
    assert (replaced["task"], replaced["schedule"], replaced["tz"], replaced["kwargs"], replaced["version"]) == (
        "t2", "1", None, {}, 2)

    gone = call(http, "DELETE", f"{PREFIX}/api/stored-jobs/report-team-3")
    assert (gone["source"], gone["version"], gone["updated_by"]) == ("code", 3, BY)
    assert call(http, "GET", f"{PREFIX}/api/stored-jobs/report-team-3", status=404)["error"] == (
        "the store holds no stored job 'report-team-3'")
    assert call(http, "DELETE", f"{PREFIX}/api/stored-jobs/report-team-3", status=404)
    assert call(http, "GET", f"{PREFIX}/api/stored-jobs") == {"stored_jobs": []}
    assert "report-team-3" not in [j["job"] for j in http.get(f"{PREFIX}/api/jobs").get_json()["jobs"]]


def test_api_overrides_resets_puts_and_deletes(store: Store) -> None:
    """Every route of stored schedules on the memory store and a SQLite file."""
    check_schedule_api(store)


def test_api_is_the_same_over_redis(tmp_path: Path) -> None:
    """The same routes on Redis."""
    backend = BACKENDS["redis"](tmp_path)
    try:
        check_schedule_api(backend.open())
    finally:
        backend.close()


BAD: List[Tuple[str, str, Any, int, str]] = [
    ("PUT", "/api/jobs/report/schedule", {"schedule": "61 * * * *"}, 400, "bad minute field '61'"),
    ("PUT", "/api/jobs/report/schedule", {"schedule": "* * * * *", "tz": "Mars/Base"}, 400, "'Mars/Base'"),
    ("PUT", "/api/jobs/report/schedule", {"schedule": "* * * * *", "tz": 5}, 400, "tz must be a string"),
    ("PUT", "/api/jobs/report/schedule", {"schedule": None}, 400, "the body needs 'schedule'"),
    ("PUT", "/api/jobs/report/schedule", {"schedule": True}, 400, "schedule must be a cron string"),
    ("PUT", "/api/jobs/report/schedule", {"schedule": "* * * * *", "timezone": "UTC"}, 400, "unknown field 'timezone'"),
    ("PUT", "/api/jobs/report/schedule", [1], 400, "must be a JSON object"),
    ("PUT", "/api/stored-jobs/s", {"schedule": "* * * * *"}, 400, "the body needs 'task'"),
    ("PUT", "/api/stored-jobs/s", {**STORED, "kwargs": [3]}, 400, "kwargs must be a JSON object"),
    ("PUT", "/api/stored-jobs/s", {**STORED, "options": {"lease": 5}}, 400, "unknown job option 'lease'"),
    ("PUT", "/api/stored-jobs/s", {**STORED, "options": {"lease_ms": -5}}, 400, "lease_ms"),
    ("PUT", "/api/stored-jobs/s", {**STORED, "options": {"tz": "UTC"}}, 400, "give tz as its own field"),
    ("PUT", "/api/stored-jobs/s", {**STORED, "task": ""}, 400, "task must be a non-empty string"),
    ("PUT", "/api/stored-jobs/s", {**STORED, "schedule": "0 25 * * *"}, 400, "bad hour field"),
    ("DELETE", "/api/stored-jobs/s", {"why": 1}, 400, "unknown field 'why'"),
    ("PUT", "/api/stored-jobs/pinned", STORED, 409, "holds an override"),
    ("PUT", "/api/jobs/kept/schedule", {"schedule": "* * * * *"}, 409, "is a stored job"),
    ("DELETE", "/api/jobs/kept/schedule", {}, 409, "is a stored job"),
    ("DELETE", "/api/stored-jobs/pinned", {}, 404, "no stored job 'pinned'"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), BAD, ids=[f"{b[0]} {b[4]}" for b in BAD])
def test_a_bad_body_or_a_clash_is_refused_with_the_reason_and_stores_nothing(
    store: Store, method: str, path: str, body: Any, status: int, reason: str
) -> None:
    """Each refusal names what was wrong; the store's records are as they were."""
    store.set_schedule("pinned", by="ops", schedule="0 * * * *")
    store.set_schedule("kept", by="ops", schedule="0 * * * *", task="t")
    before = records(store)
    error = call(client(store), method, PREFIX + path, body, status=status)["error"]
    assert reason in error, error
    assert records(store) == before


def test_writes_take_only_json(store: Store) -> None:
    """A write with another content type (a cross-site form's) is a 415; nothing is stored."""
    http = client(store)
    for method, path in [("PUT", "/api/jobs/report/schedule"), ("PUT", "/api/stored-jobs/s"),
                         ("DELETE", "/api/jobs/report/schedule"), ("DELETE", "/api/stored-jobs/s")]:  # fmt: skip
        response = http.open(PREFIX + path, method=method, data="schedule=* * * * *",
                             content_type="application/x-www-form-urlencoded")  # fmt: skip
        assert response.status_code == 415 and "application/json" in response.get_json()["error"], path
    assert records(store) == {}


def test_with_the_app_kwargs_fit_the_task_and_a_code_job_is_no_stored_job(store: Store) -> None:
    """With the app's cron: kwargs that its task does not take, an option against the app's
    defaults and a name it registers in code are refused; the app's default zone gives a stored job
    without a zone its next slot, and a stored job under a code job's name shows the code's."""
    cron = LeaseCron(store, runner="web-1", tz="Asia/Kolkata", lease_ms=10_000)
    cron.add_job(lambda: None, "*/5 * * * *", name="five")

    @cron.task("send_report")
    def send_report(ctx: object, *, team: int) -> None: ...

    http = client(store, cron=cron)
    assert "do not fit task 'send_report'" in call(
        http, "PUT", f"{PREFIX}/api/stored-jobs/s", {"task": "send_report", "schedule": "1", "kwargs": {"tea": 3}},
        status=400)["error"]  # fmt: skip
    assert "heartbeat_ms" in call(http, "PUT", f"{PREFIX}/api/stored-jobs/s",
                                  {"task": "send_report", "schedule": "1", "kwargs": {"team": 3},
                                   "options": {"heartbeat_ms": 20_000}}, status=400)["error"]  # fmt: skip
    assert "registered in code" in call(http, "PUT", f"{PREFIX}/api/stored-jobs/five", STORED, status=409)["error"]
    assert records(store) == {}

    call(http, "PUT", f"{PREFIX}/api/stored-jobs/s", {"task": "send_report", "schedule": "0 9 * * *",
                                                      "kwargs": {"team": 3}})  # fmt: skip
    job = api_job(http, "s")
    assert (job["source"], job["tz"], job["schedule"]) == ("stored", None, "0 9 * * * (Asia/Kolkata)")
    assert job["next_slot_ms"] % 1_800_000 == 0 and job["next_slot_ms"] % 3_600_000 != 0  # 09:00 at UTC+05:30
    store.set_schedule("five", by="elsewhere", schedule="1", task="send_report")  # another app's stored job
    five = api_job(http, "five")
    assert (five["source"], five["schedule"], five["version"]) == ("code", "*/5 * * * * (Asia/Kolkata)", 1)
    over = call(http, "PUT", f"{PREFIX}/api/jobs/five/schedule", {"schedule": "0 * * * *"}, status=409)
    assert "is a stored job" in over["error"]


# -- the pages ---------------------------------------------------------------------------------


def form_of(page: Node, cls: str) -> Tuple[str, Dict[str, str]]:
    """The action and the hidden fields (csrf_token, next, name) of the form of class ``cls``."""
    form = page.find("form", cls)
    assert form.attrs["method"] == "post"
    return form.attrs["action"], {i.attrs["name"]: i.attrs.get("value", "") for i in form.find_all("input")
                                  if i.attrs.get("type") == "hidden"}  # fmt: skip


def flash(http: FlaskClient, location: str) -> Node:
    """The flash message of the page at ``location``."""
    return get_page(http, location).find("p", "flash")


def test_forms_change_reset_put_and_delete_and_the_pages_show_them(store: Store) -> None:
    """The job page's form overrides a schedule and the reset form resets it; the jobs page's form
    stores a job, which both pages then show (source, version, tz, task, kwargs, who); its page's
    form replaces and deletes it. Each comes back to its page with a flash, recorded as done by
    dashboard@host."""
    simple_run(store, "report")
    http = client(store)
    page = get_page(http, f"{PREFIX}/jobs/report")
    assert page.find_all("form", "reset") == [] and page.find_all("form", "delete_stored") == []
    action, data = form_of(page, "reschedule")
    response = http.post(action, data={**data, "schedule": " */5 * * * * ", "tz": "Europe/Berlin"})
    assert response.status_code == 303 and response.headers["Location"] == f"{PREFIX}/jobs/report"
    record = store.stored_schedule("report")
    assert record is not None and (record.source, record.schedule, record.tz, record.updated_by) == (
        "override", "*/5 * * * *", "Europe/Berlin", BY)
    shown = flash(http, response.headers["Location"]).text
    assert "Rescheduled job 'report': */5 * * * *, tz Europe/Berlin; version 1" in shown

    page = get_page(http, f"{PREFIX}/jobs/report")
    about = page.find("p", "about")
    assert (about.attrs["data-source"], about.attrs["data-version"], about.attrs["data-tz"]) == (
        "override", "1", "Europe/Berlin")
    assert about.find("span", "schedule").text == "*/5 * * * * (Europe/Berlin)"
    assert about.find("span", "source").text == "override v1"
    assert page.find("p", "stored").find("span", "by").text == BY
    assert page.find("form", "reschedule").find("input", name="schedule").attrs["value"] == "*/5 * * * *"
    cell = get_page(http, f"{PREFIX}/").find("tr", "job", data_job="report").find("td", "schedule")
    assert (cell.attrs["data-source"], cell.attrs["data-version"]) == ("override", "1")
    assert cell.text == "*/5 * * * * (Europe/Berlin) override v1"

    action, data = form_of(page, "reset")
    response = http.post(action, data=data)
    assert response.status_code == 303
    assert "Reset job 'report' to its code's schedule" in flash(http, response.headers["Location"]).text
    assert store.stored_schedule("report").source == "code"  # type: ignore[union-attr]

    jobs = get_page(http, f"{PREFIX}/")
    assert jobs.find("details", "new-stored").find("form", "put_stored")
    action, data = form_of(jobs, "put_stored")
    response = http.post(action, data={**data, "name": "team/3 <b>", "task": "send_report", "schedule": "0 9 * * 1-5",
                                       "tz": "Europe/Berlin", "kwargs": '{"team": 3, "to": "<ops>"}',
                                       "options": '{"timeout_ms": 60000}'})  # fmt: skip
    assert response.status_code == 303 and response.headers["Location"] == f"{PREFIX}/"
    assert "Stored job 'team/3 <b>': task send_report" in flash(http, f"{PREFIX}/").text
    stored = store.stored_schedule("team/3 <b>")
    assert stored is not None and stored.as_job().to_dict() == {
        "name": "team/3 <b>", "task": "send_report", "schedule": "0 9 * * 1-5", "tz": "Europe/Berlin",
        "kwargs": {"team": 3, "to": "<ops>"}, "options": {"timeout_ms": 60000}, "version": 1, "updated_by": BY,
        "updated_ms": stored.updated_ms}  # fmt: skip

    row = get_page(http, f"{PREFIX}/").find("tr", "job", data_job="team/3 <b>")
    assert row.find("td", "schedule").attrs["data-source"] == "stored"
    assert row.find("td", "next").find("time")
    page = get_page(http, row.find("td", "name").find("a").attrs["href"])
    shown = page.find("p", "stored")
    assert (shown.find("code", "task").text, shown.find("code", "kwargs").text) == (
        "send_report", '{"team": 3, "to": "<ops>"}')
    assert shown.find("code", "options").text == '{"timeout_ms": 60000}'
    assert page.find_all("form", "reschedule") == []
    edit = page.find("details", "edit-stored").find("form", "put_stored")
    assert edit.find("textarea", name="kwargs").text == '{"team": 3, "to": "<ops>"}'
    action, data = form_of(page, "put_stored")
    assert data["name"] == "team/3 <b>"
    response = http.post(action, data={**data, "task": "send_report", "schedule": "30", "tz": "", "kwargs": "",
                                       "options": ""})  # fmt: skip
    assert "Replaced job 'team/3 <b>'" in flash(http, response.headers["Location"]).text
    replaced = store.stored_schedule("team/3 <b>")
    assert replaced is not None and (replaced.schedule, replaced.tz, dict(replaced.kwargs), replaced.version) == (
        "30", None, {}, 2)

    action, data = form_of(get_page(http, response.headers["Location"]), "delete_stored")
    response = http.post(action, data=data)
    assert "Deleted stored job 'team/3 <b>'" in flash(http, response.headers["Location"]).text
    assert store.stored_schedule("team/3 <b>").source == "code"  # type: ignore[union-attr]


NEW = {"name": "s", "task": "t", "schedule": "1"}
FORM_ERRORS: List[Tuple[str, Dict[str, str], str]] = [
    ("reschedule", {"schedule": "61 * * * *"}, "bad minute field '61'"),
    ("reschedule", {"schedule": "* * * * *", "tz": "Mars/Base"}, "unknown time zone 'Mars/Base'"),
    ("reschedule", {"schedule": ""}, "give a schedule"),
    ("put_stored", {**NEW, "kwargs": "{team: 3}"}, "kwargs must be a JSON object"),
    ("put_stored", {**NEW, "kwargs": "[3]"}, "kwargs must be a JSON object"),
    ("put_stored", {**NEW, "options": '{"lease": 1}'}, "unknown job option 'lease'"),
    ("put_stored", {**NEW, "options": "lease_ms=5"}, "options must be a JSON object"),
    ("put_stored", {**NEW, "tz": "Nowhere/X"}, "unknown time zone 'Nowhere/X'"),
    ("put_stored", {**NEW, "schedule": "* * *"}, "'s': schedule"),
    ("put_stored", {**NEW, "task": ""}, "task must be a non-empty string"),
    ("put_stored", {**NEW, "name": ""}, "give the stored job a name"),
    ("put_stored", {**NEW, "name": "report"}, "holds an override"),
]


@pytest.mark.parametrize(("cls", "fields", "reason"), FORM_ERRORS, ids=[e[2] for e in FORM_ERRORS])
def test_a_refused_form_flashes_the_reason_and_stores_nothing(
    store: Store, cls: str, fields: Dict[str, str], reason: str
) -> None:
    """The form comes back to its page with an error flash naming what was wrong; nothing is stored."""
    store.set_schedule("report", by="ops", schedule="0 * * * *")
    before = records(store)
    http = client(store)
    page = get_page(http, f"{PREFIX}/jobs/report" if cls == "reschedule" else f"{PREFIX}/")
    action, data = form_of(page, cls)
    response = http.post(action, data={**data, **fields})
    assert response.status_code == 303
    shown = flash(http, response.headers["Location"])
    assert "error" in shown.classes and shown.attrs["role"] == "alert"
    assert shown.text.startswith("Nothing stored: ") and reason in shown.text, shown.text
    assert records(store) == before


def test_forms_need_the_csrf_token_and_read_only_refuses_every_write(store: Store) -> None:
    """Without the token a form is a 400; read-only shows none of the forms and answers every
    write, form or API, 403; nothing is stored."""
    store.set_schedule("kept", by="ops", schedule="1", task="t")
    store.set_schedule("report", by="ops", schedule="0 * * * *")
    before = records(store)
    http = client(store)
    token = form_of(get_page(http, f"{PREFIX}/"), "put_stored")[1]["csrf_token"]
    forms = [("/jobs/report/schedule", {"schedule": "1"}), ("/jobs/report/reset", {}), ("/jobs/kept/delete", {}),
             ("/job/reset?job=report", {}), ("/stored-jobs", {"name": "n", "task": "t", "schedule": "1"})]  # fmt: skip
    for path, fields in forms:
        response = http.post(PREFIX + path, data=fields)
        assert response.status_code == 400 and "CSRF" in response.get_data(as_text=True), path
    read_only = client(store, read_only=True)
    read_only.set_cookie("leasecron_csrf", token, path=f"{PREFIX}/")
    for url in (f"{PREFIX}/", f"{PREFIX}/jobs/report", f"{PREFIX}/jobs/kept"):
        page = get_page(read_only, url)
        assert page.find_all("form") == [f for f in page.find_all("form") if "search" in f.classes], url
        assert page.find_all("details") == []
    for path, fields in forms:
        response = read_only.post(PREFIX + path, data={**fields, "csrf_token": token})
        assert response.status_code == 403 and "read-only" in response.get_data(as_text=True), path
    writes = [("PUT", "/api/jobs/report/schedule", {"schedule": "1"}), ("DELETE", "/api/jobs/report/schedule", {}),
              ("PUT", "/api/stored-jobs/n", STORED), ("DELETE", "/api/stored-jobs/kept", {}),
              ("PUT", "/api/stored-job?job=n", "x")]  # fmt: skip
    for method, path, body in writes:
        assert "read-only" in call(read_only, method, PREFIX + path, body, status=403)["error"], path
    assert call(read_only, "GET", f"{PREFIX}/api/stored-jobs")["stored_jobs"][0]["name"] == "kept"  # reads still work
    assert records(store) == before


def test_hostile_names_as_stored_jobs_through_the_api_and_the_forms(store: Store) -> None:
    """Every hostile name is stored, read, listed, shown and deleted as itself: in the path
    (percent-encoded whole) where a path can carry it, else as ``?job=``; its page's forms act on it."""
    http = client(store)
    for name in HOSTILE:
        quoted = quote(name, safe="")
        path = f"{PREFIX}/api/stored-jobs/{quoted}"
        if name in (".", "..") or name.startswith("/"):
            path = f"{PREFIX}/api/stored-job?job={quoted}"
        assert call(http, "PUT", path, {"task": "t", "schedule": "60"})["name"] == name
        assert call(http, "GET", path)["name"] == name
    listed = call(http, "GET", f"{PREFIX}/api/stored-jobs")["stored_jobs"]
    assert sorted(job["name"] for job in listed) == sorted(HOSTILE)
    jobs_page = get_page(http, f"{PREFIX}/?per_page=500")
    for name in HOSTILE:
        row = jobs_page.find("tr", "job", data_job=name)
        assert row.find("td", "schedule").attrs["data-source"] == "stored"
        page = get_page(http, row.find("td", "name").find("a").attrs["href"])
        assert page.find("h1", "job-name").text == name
        action, data = form_of(page, "delete_stored")
        response = http.post(action, data=data)
        assert response.status_code == 303, (name, response.get_data(as_text=True)[:300])
        assert repr(name) in flash(http, response.headers["Location"]).text
    assert call(http, "GET", f"{PREFIX}/api/stored-jobs")["stored_jobs"] == []
    assert {record.version for record in records(store).values()} == {2}


def test_stored_jobs_without_runs_keep_the_jobs_page_at_six_store_calls() -> None:
    """300 stored jobs and no runs: all listed, with the same six store calls a page."""
    inner = MemoryStore()
    for i in range(300):
        inner.set_schedule(f"stored-{i:03d}", by="ops", schedule="60", task="t")
    store = CountingStore(inner)
    http = client(store)
    page = get_page(http, f"{PREFIX}/?per_page=500")
    assert len(page.find_all("tr", "job")) == 300
    assert dict(store.calls) == {"now_ms": 1, "jobs": 1, "job_states": 1, "schedule_changes": 1, "instances": 1,
                                 "recent_runs": 1}  # fmt: skip

