"""The dashboard's defences: CSRF, safe redirects, read-only, the password, escaping of hostile
job names and error texts on every page and endpoint, and no store password anywhere."""

from __future__ import annotations

import hmac
import socket
from base64 import b64encode
from pathlib import Path
from typing import Dict, List, Tuple
from urllib.parse import quote

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

import leasecron
from leasecron import ConfigError, MemoryStore, Store
from leasecron.contrib.dashboard import blueprint, create_app, security
from tests.conftest import BACKENDS
from tests.contrib.dashboard.conftest import (
    ERROR_TEXT,
    HOSTILE,
    PREFIX,
    client,
    get_page,
    history,
    mount,
    simple_run,
)
from tests.contrib.dashboard.html import Node, parse

ACTIONS = ("pause", "resume", "trigger")


def form_data(form: Node) -> Dict[str, str]:
    """The values a browser sends for ``form`` (its inputs as they stand)."""
    return {i.attrs["name"]: i.attrs.get("value", "") for i in form.find_all("input")}


def basic(user: str, password: str) -> Dict[str, str]:
    """The Authorization header of HTTP basic authentication."""
    return {"Authorization": "Basic " + b64encode(f"{user}:{password}".encode()).decode()}


def cookie_header(response: TestResponse, name: str) -> str:
    """The Set-Cookie header that sets ``name``."""
    (header,) = [h for h in response.headers.getlist("Set-Cookie") if h.startswith(f"{name}=")]
    return header


# -- CSRF and redirects ---------------------------------------------------------------------


def test_csrf_cookie_and_forms_refuse_a_missing_or_wrong_token(store: Store) -> None:
    """The token cookie is HttpOnly, SameSite=Strict and limited to the dashboard's path; a form
    posted without the token, with another one, or without the cookie is a 400 and changes nothing."""
    simple_run(store, "etl")
    http = client(store)
    response = http.get(f"{PREFIX}/")
    header = cookie_header(response, security.CSRF_COOKIE)
    assert "HttpOnly" in header and "SameSite=Strict" in header and f"Path={PREFIX}/" in header
    form = parse(response.get_data(as_text=True)).find("tr", "job", data_job="etl").find("form", "pause")
    data = form_data(form)
    token = data["csrf_token"]
    assert header.startswith(f"{security.CSRF_COOKIE}={token};")
    assert http.get(f"{PREFIX}/jobs/etl").headers.getlist("Set-Cookie") == []  # the same token is kept

    for action in ACTIONS:
        url = f"{PREFIX}/jobs/etl/{action}"
        cases: List[Tuple[FlaskClient, Dict[str, str]]] = [
            (http, {"next": data["next"]}),  # no token
            (http, {**data, "csrf_token": ""}),
            (http, {**data, "csrf_token": token[:-1] + ("A" if token[-1] != "A" else "B")}),
            (client(store), data),  # a token, but no cookie: another browser
        ]
        for sender, sent in cases:
            refused = sender.post(url, data=sent)
            assert refused.status_code == 400, (action, sent)
            assert "bad or missing CSRF token" in refused.get_data(as_text=True)
    state = store.job_state("etl")
    assert not state.paused and state.requests == ()


@pytest.mark.parametrize(
    "target",
    ["https://evil.example/", "//evil.example/x", "/elsewhere", "\\\\evil.example", "/\\evil.example",
     f"{PREFIX}/../admin", f"{PREFIX}/%2e%2e/admin", "javascript:alert(1)", f"{PREFIX}/\r\nSet-Cookie: x=1", ""],
)
def test_a_form_redirects_only_within_the_dashboard(store: Store, target: str) -> None:
    """``next`` outside the dashboard's paths sends the browser to the jobs page instead."""
    http = client(store)
    token = form_data(get_page(http, f"{PREFIX}/jobs/etl").find("form", "trigger"))["csrf_token"]
    response = http.post(f"{PREFIX}/jobs/etl/trigger", data={"csrf_token": token, "next": target})
    assert response.status_code == 303 and response.headers["Location"] == f"{PREFIX}/"
    inside = f"{PREFIX}/jobs/etl?status=failed"
    kept = http.post(f"{PREFIX}/jobs/etl/trigger", data={"csrf_token": token, "next": inside})
    assert kept.headers["Location"] == inside


# -- read-only -----------------------------------------------------------------------------


def test_read_only_hides_the_forms_and_refuses_every_post(store: Store) -> None:
    """Read-only: no action form on any page, and every POST, form or API, is a 403 saying so."""
    simple_run(store, "etl")
    http = client(store, read_only=True)
    writable = client(store)
    token = form_data(get_page(writable, f"{PREFIX}/").find("form", "trigger"))["csrf_token"]
    for url in (f"{PREFIX}/", f"{PREFIX}/jobs/etl"):
        page = get_page(http, url)
        assert page.find_all("form", "action") == [] and page.find_all("td", "actions") == []
        assert page.find("span", "read-only").text == "read-only"
        assert get_page(writable, url).find_all("form", "action")  # the writable dashboard has them
    http.set_cookie(security.CSRF_COOKIE, token, path=f"{PREFIX}/")
    for action in ACTIONS:
        for url, kwargs in [
            (f"{PREFIX}/jobs/etl/{action}", {"data": {"csrf_token": token, "next": f"{PREFIX}/"}}),
            (f"{PREFIX}/job/{action}?job=etl", {"data": {"csrf_token": token}}),
            (f"{PREFIX}/jobs/etl/{action}", {}),
            (f"{PREFIX}/api/jobs/etl/{action}", {"json": {"note": "x"}}),
            (f"{PREFIX}/api/job/{action}?job=etl", {"json": {}}),
            (f"{PREFIX}/api/jobs/etl/{action}", {"data": "x", "headers": {"Content-Type": "text/plain"}}),
        ]:
            response = http.post(url, **kwargs)
            assert response.status_code == 403, url
            assert "read-only" in response.get_data(as_text=True)
    state = store.job_state("etl")
    assert not state.paused and state.requests == ()


# -- password ------------------------------------------------------------------------------


def test_password_guards_every_page_endpoint_and_file(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a password, every URL without it (or with a wrong one) is a 401 with a Basic challenge;
    any user name with the password passes, is compared in constant time, and is who acts."""
    simple_run(store, "etl")
    compared: List[Tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    http = client(store, password="pa55 wörd")
    urls = [f"{PREFIX}/", f"{PREFIX}/jobs/etl", f"{PREFIX}/job?job=etl", f"{PREFIX}/api/jobs",
            f"{PREFIX}/api/jobs/etl/runs", f"{PREFIX}/static/dashboard.js", f"{PREFIX}/static/dashboard.css",
            f"{PREFIX}/jobs/etl/runs/{store.runs('etl')[0].slot_ms}", f"{PREFIX}/instances", f"{PREFIX}/api/instances"]
    posts = [f"{PREFIX}/jobs/etl/{a}" for a in ACTIONS] + [f"{PREFIX}/api/jobs/etl/{a}" for a in ACTIONS]
    for headers in [{}, basic("admin", "wrong"), basic("admin", "pa55 wörd "), basic("", ""),
                    {"Authorization": "Bearer pa55 wörd"}]:
        for url in urls:
            response = http.get(url, headers=headers)
            assert response.status_code == 401, (url, headers)
            assert response.headers["WWW-Authenticate"] == 'Basic realm="leasecron"'
        for url in posts:
            assert http.post(url, json={}, headers=headers).status_code == 401, (url, headers)
    assert compared, "the password was not compared with hmac.compare_digest"
    compared.clear()
    for user in ("admin", "anyone else", ""):
        for url in urls:
            assert http.get(url, headers=basic(user, "pa55 wörd")).status_code == 200, (url, user)
    assert compared and all(a == b for a, b in compared)
    answer = http.post(f"{PREFIX}/api/jobs/etl/pause", json={}, headers=basic("alice", "pa55 wörd"))
    assert answer.status_code == 200 and answer.get_json()["paused_by"] == f"alice@{socket.gethostname()}"
    assert store.job_state("etl").paused_by == f"alice@{socket.gethostname()}"


# -- hostile names -------------------------------------------------------------------------


def _checked(response: TestResponse, status: int = 200) -> str:
    text = response.get_data(as_text=True)
    assert response.status_code == status, (response.request.url, response.status_code, text[:1000])
    for bad in ("<script>alert", "<b>bold", "<i>", "\"quote'"):  # never unescaped in HTML; JSON escapes <
        if response.mimetype == "text/html":
            assert bad not in text, bad
    if response.mimetype == "text/html":
        scripts = parse(text).find_all("script")
        assert [s.attrs.get("src", "").rsplit("/", 1)[-1] for s in scripts] == ["dashboard.js"]
    return text


def test_hostile_names_round_trip_through_every_page_and_endpoint(store: Store) -> None:
    """Each hostile name (tags, quotes, ``../``, ``/``, percent signs, ``.``, ``..``, 1,000
    characters, unicode) appears escaped on every page, its links lead to its own pages, and its
    forms and API act on it and no other job; error texts with tags stay text."""
    for name in HOSTILE:
        simple_run(store, name, "failed", error=ERROR_TEXT)
    store.pause(HOSTILE[0], by="ops<b>@host", note="<script>alert(2)</script>")
    http = client(store)
    jobs_page = parse(_checked(http.get(f"{PREFIX}/")))
    assert sorted(r.attrs["data-job"] for r in jobs_page.find_all("tr", "job")) == sorted(HOSTILE)
    assert jobs_page.find("tr", "job", data_job=HOSTILE[0]).find("span", "note").text == "<script>alert(2)</script>"
    for name in HOSTILE:
        row = jobs_page.find("tr", "job", data_job=name)
        link = row.find("td", "name").find("a")
        assert link.text == name
        job_page = parse(_checked(http.get(link.attrs["href"])))
        assert job_page.find("h1", "job-name").text == name, link.attrs["href"]
        (section,) = job_page.find_all("section", "run")
        run_href = section.find("h3").find("a").attrs["href"]
        assert run_href == row.find("a", "mark").attrs["href"]
        run_page = parse(_checked(http.get(run_href)))
        assert run_page.find("dd", "field-job").text == name
        assert run_page.find("dl", "run-fields").find("pre", "error").raw_text == ERROR_TEXT
        back = parse(_checked(http.get(run_page.find("a", "job-link").attrs["href"])))
        assert back.find("h1", "job-name").text == name
        for status in ("failed", "success"):
            href = job_page.find("a", "filter", data_status=status).attrs["href"]
            found = parse(_checked(http.get(href))).find_all("section", "run")
            assert len(found) == (1 if status == "failed" else 0), (name, status)

        # the forms of the job's page act on it
        forms = {f.classes[1]: f for f in job_page.find_all("form", "action")}
        first = "resume" if name == HOSTILE[0] else "pause"
        for action in (first, "trigger"):
            response = http.post(forms[action].attrs["action"], data={**form_data(forms[action]), "note": "n"})
            assert response.status_code == 303, (name, action, response.get_data(as_text=True)[:500])
            assert response.headers["Location"] == link.attrs["href"]
            flash = parse(_checked(http.get(response.headers["Location"]))).find("p", "flash").text
            assert repr(name) in flash
        state = store.job_state(name)
        assert state.paused == (first == "pause") and len(state.pending) == 1

        # the API, with the name in the path (percent-encoded whole) and as ?job=
        forms_of_api = [f"{PREFIX}/api/job/runs?job={quote(name, safe='')}"]
        if name not in (".", "..") and not name.startswith("/"):
            forms_of_api.append(f"{PREFIX}/api/jobs/{quote(name, safe='')}/runs")
        for url in forms_of_api:
            answer = http.get(url).get_json()
            assert answer["job"] == name and answer["runs"][0]["error"] == ERROR_TEXT, url
        path = f"{PREFIX}/api/jobs/{quote(name, safe='')}" if name not in (".", "..") and not name.startswith("/") \
            else None
        for action in ("pause", "resume", "trigger"):
            url = f"{path}/{action}" if path else f"{PREFIX}/api/job/{action}?job={quote(name, safe='')}"
            response = http.post(url, json={"note": "<b>api</b>"})
            assert response.status_code == 200, (url, response.get_data(as_text=True)[:500])
            if action == "trigger":
                assert response.get_json()["request"]["job"] == name
                assert response.get_json()["slot_ms"] in [r.slot_ms for r in store.job_state(name).pending]
                continue
            assert response.get_json()["job"] == name, url
            assert store.job_state(name).paused == (action == "pause")
            assert (store.job_state(name).note == "<b>api</b>") == (action == "pause")
    listed = http.get(f"{PREFIX}/api/jobs?per_page=500").get_json()["jobs"]
    assert sorted(job["job"] for job in listed) == sorted(HOSTILE)
    for job in listed:
        assert job["runs"][0]["error"] == ERROR_TEXT
    assert sorted(store.jobs()) == sorted(HOSTILE)  # no action reached another name


def test_no_store_password_reaches_a_page_or_an_answer(tmp_path: Path) -> None:
    """A store opened from a URL with a password: no page, answer or header shows it."""
    backend = BACKENDS["redis"](tmp_path)
    host, port = backend.nodes()[0]
    store = leasecron.open_store(f"redis://:s3cret@{host}:{port}/0?prefix={backend.namespace}")
    try:
        history(store, "etl")
        http = client(store)
        jobs_page = get_page(http, f"{PREFIX}/")
        assert ":***@" in jobs_page.find("span", "store").text
        urls = [f"{PREFIX}/", f"{PREFIX}/jobs/etl", f"{PREFIX}/api/jobs", f"{PREFIX}/api/jobs/etl/runs",
                f"{PREFIX}/jobs/etl/runs/{store.runs('etl')[0].slot_ms}", f"{PREFIX}/jobs/etl/runs/1",
                f"{PREFIX}/?page=x"]
        responses = [http.get(url) for url in urls] + [http.post(f"{PREFIX}/api/jobs/etl/trigger", json={})]
        for response in responses:
            assert "s3cret" not in response.get_data(as_text=True) and "s3cret" not in str(response.headers)
    finally:
        store.close()
        backend.close()


# -- the rest: headers, settings, two dashboards -------------------------------------------


def test_every_answer_forbids_inline_script_framing_and_sniffing(store: Store) -> None:
    """Pages, API answers and refusals carry the security headers."""
    http = client(store, password="pw")
    for url, headers in [(f"{PREFIX}/", basic("u", "pw")), (f"{PREFIX}/api/jobs", basic("u", "pw")),
                         (f"{PREFIX}/", {}), (f"{PREFIX}/jobs/x/runs/1", basic("u", "pw"))]:
        response = http.get(url, headers=headers)
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert response.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "options, word",
    [({"refresh_ms": -1}, "refresh_ms"), ({"refresh_ms": "2000"}, "refresh_ms"), ({"password": ""}, "password"),
     ({"read_only": "yes"}, "read_only"), ({"name": "a.b"}, "name"), ({"cron": object()}, "cron")],
)
def test_bad_settings_are_config_errors_naming_them(options: Dict[str, object], word: str) -> None:
    """A bad argument of blueprint() is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=word):
        blueprint(MemoryStore(), **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="store"):
        blueprint("sqlite:///x.db")  # type: ignore[arg-type]


def test_two_dashboards_on_one_app_and_create_app(tmp_path: Path) -> None:
    """Two blueprints (two stores, names and prefixes) live side by side; create_app serves one at /
    with its refresh interval."""
    first, second = MemoryStore(), MemoryStore()
    simple_run(first, "one")
    simple_run(second, "two")
    app = mount(first)
    app.register_blueprint(blueprint(second, name="other", read_only=True), url_prefix="/other")
    http = app.test_client()
    assert [r.attrs["data-job"] for r in get_page(http, f"{PREFIX}/").find_all("tr", "job")] == ["one"]
    other = get_page(http, "/other/")
    assert [r.attrs["data-job"] for r in other.find_all("tr", "job")] == ["two"]
    assert other.find("tr", "job").find("a").attrs["href"] == "/other/jobs/two"
    assert other.find_all("form", "action") == []
    alone = create_app(second, refresh_ms=500)
    assert isinstance(alone, Flask)
    page = get_page(alone.test_client(), "/")
    assert page.find("body").attrs["data-refresh-ms"] == "500"
    assert page.find("tr", "job").find("a").attrs["href"] == "/jobs/two"
    assert alone.test_client().get("/static/dashboard.js").status_code == 200
