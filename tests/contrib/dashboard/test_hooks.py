"""The blueprint's hooks for an app with its own login and CSRF protection: ``actor`` names who
acts, ``form_token`` gives the field every form carries (and turns the dashboard's own CSRF check
off); without them, nothing changes (``test_security`` checks the defaults)."""

from __future__ import annotations

from typing import List

import pytest
from flask import Request

from leasecron import ConfigError, MemoryStore, Store
from leasecron.contrib.dashboard import blueprint, security
from tests.contrib.dashboard.conftest import PREFIX, client, get_page, simple_run
from tests.contrib.dashboard.test_security import form_data


def test_actor_names_who_acts_in_forms_and_the_api(store: Store) -> None:
    """Each action, from a form or the API, is stored under the name ``actor`` gives for the request."""
    asked: List[str] = []

    def actor(request: Request) -> str:
        asked.append(request.path)
        return request.headers.get("X-User", "nobody")

    http = client(store, actor=actor)
    token = form_data(get_page(http, f"{PREFIX}/job?job=etl").find("form", "pause"))["csrf_token"]
    done = http.post(f"{PREFIX}/jobs/etl/pause", data={"csrf_token": token, "note": "n"}, headers={"X-User": "ann"})
    assert done.status_code == 303
    assert store.job_state("etl").paused_by == "ann"
    answer = http.post(f"{PREFIX}/api/jobs/etl/trigger", json={}, headers={"X-User": "ben"})
    assert answer.status_code == 200 and answer.get_json()["request"]["requested_by"] == "ben"
    put = http.put(f"{PREFIX}/api/stored-jobs/nightly", json={"task": "t", "schedule": "0 3 * * *"},
                   headers={"X-User": "cy"})  # fmt: skip
    assert put.status_code == 200
    stored = store.stored_schedule("nightly")
    assert stored is not None and stored.updated_by == "cy"
    assert asked == [f"{PREFIX}/jobs/etl/pause", f"{PREFIX}/api/jobs/etl/trigger", f"{PREFIX}/api/stored-jobs/nightly"]


def test_form_token_is_the_forms_field_and_no_csrf_cookie_is_set(store: Store) -> None:
    """With ``form_token``, every form carries the field it gives, no CSRF cookie is set, and a
    form is taken without the dashboard's own token (the app checks its own before the view)."""
    simple_run(store, "etl")
    http = client(store, form_token=lambda request: ("csrfmiddlewaretoken", "outside-" + request.method))
    response = http.get(f"{PREFIX}/")
    assert security.CSRF_COOKIE not in response.headers.get("Set-Cookie", "")
    page = get_page(http, f"{PREFIX}/jobs/etl")
    forms = page.find_all("form", "action")
    assert forms and all(form_data(form).get("csrfmiddlewaretoken") == "outside-GET" for form in forms)
    assert all("csrf_token" not in form_data(form) for form in forms)
    done = http.post(f"{PREFIX}/jobs/etl/pause", data={"next": f"{PREFIX}/jobs/etl"})
    assert (done.status_code, done.headers["Location"]) == (303, f"{PREFIX}/jobs/etl")
    assert store.job_state("etl").paused
    assert http.post(f"{PREFIX}/api/jobs/etl/resume", data={"x": "1"}).status_code == 415  # the API's own rule stays


@pytest.mark.parametrize("hook", ["actor", "form_token"])
def test_a_hook_that_is_not_callable_is_refused(hook: str) -> None:
    """A hook must be a callable or None: anything else is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=f"dashboard: {hook} must be a callable or None, not 'x'"):
        blueprint(MemoryStore(), **{hook: "x"})  # type: ignore[arg-type]
