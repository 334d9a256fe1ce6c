"""The JSON API over real stores (memory, SQLite file; Redis once, to show it is the same on any
backend): the jobs, a job's runs, and the actions, JSON bodies only."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Dict

import pytest
from flask.testing import FlaskClient

from leasecron import LeaseCron, Store
from tests.conftest import BACKENDS
from tests.contrib.dashboard.conftest import ERROR_TEXT, PREFIX, client, history, simple_run

JSON = "application/json"


def post(http: FlaskClient, url: str, body: Any = None, status: int = 200) -> Dict[str, Any]:
    """POST ``body`` as JSON; the answer's JSON (the test fails on another status)."""
    response = http.post(url, json=body if body is not None else {})
    assert response.status_code == status, (url, response.status_code, response.get_data(as_text=True))
    assert response.mimetype == JSON
    return response.get_json()  # type: ignore[no-any-return]


def check_api(store: Store) -> None:
    """The whole API on ``store``: what each endpoint answers, and what the store then holds."""
    slots = history(store, "etl")
    http = client(store)
    data = http.get(f"{PREFIX}/api/jobs").get_json()
    assert isinstance(data["now_ms"], int) and data["total"] == 1 and data["page"] == 1
    (etl,) = data["jobs"]
    assert etl["job"] == "etl" and etl["paused"] is False and etl["paused_by"] is None and etl["note"] is None
    assert etl["requests"] == [] and etl["schedule"] is None and etl["next_slot_ms"] is None
    assert [run["slot_ms"] for run in etl["runs"]] == sorted(slots.values(), reverse=True)
    assert etl["runs"] == [run.to_dict() for run in store.runs("etl", limit=30)]
    failed = next(run for run in etl["runs"] if run["slot_ms"] == slots["failed"])
    assert failed["error"] == ERROR_TEXT and failed["attempts"][0]["outcome"] == "failed"
    chain = next(run for run in etl["runs"] if run["slot_ms"] == slots["chain"])
    assert [(a["number"], a["runner"], a["outcome"]) for a in chain["attempts"]] == [
        (1, "web-1", "expired"), (2, "web-2", "success")
    ]
    (live,) = etl["live"]
    assert live["slot_ms"] == slots["running"] and live["runner"] == "web-3"
    assert live["lease_left_ms"] == live["lease_end_ms"] - data["now_ms"] > 0

    runs = http.get(f"{PREFIX}/api/jobs/etl/runs?limit=2").get_json()
    assert runs["job"] == "etl" and [r["slot_ms"] for r in runs["runs"]] == [slots["running"], slots["handed-over"]]
    only = http.get(f"{PREFIX}/api/jobs/etl/runs?status=failed").get_json()["runs"]
    assert [r["slot_ms"] for r in only] == [slots["failed"]]

    state = post(http, f"{PREFIX}/api/jobs/etl/pause", {"note": "maintenance <b>"})
    assert state["paused"] is True and state["note"] == "maintenance <b>"
    assert state["paused_by"] == f"dashboard@{socket.gethostname()}"
    assert store.job_state("etl").note == "maintenance <b>"
    listed = http.get(f"{PREFIX}/api/jobs").get_json()["jobs"][0]
    assert listed["paused"] is True and listed["note"] == "maintenance <b>"
    assert post(http, f"{PREFIX}/api/jobs/etl/resume")["paused"] is False
    assert not store.job_state("etl").paused
    answer = post(http, f"{PREFIX}/api/jobs/etl/trigger")
    (request,) = store.job_state("etl").pending
    assert answer["slot_ms"] == request.slot_ms and request.requested_by == f"dashboard@{socket.gethostname()}"
    requests = http.get(f"{PREFIX}/api/jobs").get_json()["jobs"][0]["requests"]
    assert [(r["slot_ms"], r["state"]) for r in requests] == [(request.slot_ms, "pending")]


def test_api_serves_jobs_runs_and_actions(store: Store) -> None:
    """GET /api/jobs and /api/jobs/<job>/runs answer what the store holds; POST pause (with a
    note), resume and trigger change it, as dashboard@host."""
    check_api(store)


def test_api_is_the_same_over_redis(tmp_path: Path) -> None:
    """The same API over a Redis store: the dashboard asks only the store contract."""
    backend = BACKENDS["redis"](tmp_path)
    try:
        check_api(backend.open())
    finally:
        backend.close()


def test_api_posts_take_json_only(store: Store) -> None:
    """A POST that is not application/json is a 415 (a cross-site form cannot send JSON); a body
    that is not a JSON object, or a note that is not text, is a 400; nothing is written."""
    simple_run(store, "etl")
    http = client(store)
    for action in ("pause", "resume", "trigger"):
        url = f"{PREFIX}/api/jobs/etl/{action}"
        for kind, body in [("application/x-www-form-urlencoded", "note=x"), ("text/plain", '{"note": "x"}'),
                           ("multipart/form-data; boundary=b", "--b--")]:
            response = http.post(url, data=body, headers={"Content-Type": kind})
            assert response.status_code == 415, (action, kind)
            assert "application/json" in response.get_json()["error"]
        assert http.post(url).status_code == 415  # no body, no type
        bad = http.post(url, data="{not json", headers={"Content-Type": JSON})
        assert bad.status_code == 400 and "JSON" in bad.get_json()["error"]
        assert post(http, url, ["a list"], status=400)["error"]
    assert post(http, f"{PREFIX}/api/jobs/etl/pause", {"note": 5}, status=400)["error"].startswith('"note"')
    long = post(http, f"{PREFIX}/api/jobs/etl/pause", {"note": "n" * 1001}, status=400)
    assert "note must be at most 1000" in long["error"]
    state = store.job_state("etl")
    assert not state.paused and state.pending == ()


def test_api_arguments_are_checked(store: Store) -> None:
    """Bad paging, limits and statuses are 400s naming the argument, as JSON."""
    http = client(store)
    for url, name in [("/api/jobs?per_page=501", "per_page"), ("/api/jobs?page=x", "page"),
                      ("/api/jobs?page=" + "9" * 5000, "page"), ("/api/jobs/etl/runs?limit=0", "limit"),
                      ("/api/jobs/etl/runs?status=done", "status"), ("/api/job/runs", "job")]:
        response = http.get(PREFIX + url)
        assert response.status_code == 400 and name in response.get_json()["error"], url


def test_api_trigger_takes_max_late_ms_from_the_apps_job(store: Store) -> None:
    """With ``cron``, a trigger's request expires after the registered job's max_late_ms + 10 s;
    the jobs list gives the job's schedule and next slot."""
    cron = LeaseCron(store, runner="web-1")
    cron.add_job(lambda: None, "0 * * * *", name="hourly", max_late_ms=120_000)
    http = client(store, cron=cron)
    answer = post(http, f"{PREFIX}/api/jobs/hourly/trigger")
    assert answer["request"]["expires_ms"] - answer["slot_ms"] == 130_000
    listed = http.get(f"{PREFIX}/api/jobs").get_json()
    (job,) = listed["jobs"]
    assert job["schedule"] == "0 * * * *" and job["registered"] is True
    assert job["next_slot_ms"] == cron.jobs["hourly"].schedule.next_after(listed["now_ms"])


@pytest.mark.parametrize("path", ["/api/jobs/etl/pausex", "/api/jobs/etl/runs/x"])
def test_unknown_api_paths_are_404(store: Store, path: str) -> None:
    """A path the API does not have is a 404, not another job's data."""
    simple_run(store, "etl")
    assert client(store).get(PREFIX + path).status_code == 404
