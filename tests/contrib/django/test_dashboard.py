"""The dashboard in the project's URLconf (``path("cron/", include("leasecron.contrib.django.urls"))``),
served by a real gunicorn process of the test project and visited over HTTP with cookies, as a
browser does: staff only (others to the login page, 403 from the API), actions stored under the
Django user's name, Django's CSRF protection on the forms, ``LEASECRON_DASHBOARD``'s read-only."""

from __future__ import annotations

import html
import http.cookiejar
import json
import re
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, Optional, Tuple
from urllib.parse import quote, urlencode

import pytest

from leasecron import open_store
from leasecron.contrib.django.dashboard import dashboard_options
from leasecron.errors import ConfigError
from tests.cli_support import Process

from .conftest import PROJECT, Project

#: Job names that try the mount's paths: a slash, percent signs, dot segments, a query, non-ASCII.
HOSTILE = ["caf\u00e9/\u00fcber \U0001f680", "a/runs/5", "%41%2F", "..", "q?x=1#frag&y", "<b>\"x'"]
USERS = (
    "from django.contrib.auth.models import User;"
    "User.objects.create_user('alice', password='pw-alice', is_staff=True);"
    "User.objects.create_user('bob', password='pw-bob')"
)
LISTENING = r"Listening at: http://127\.0\.0\.1:(\d+)"
#: A job's row on the jobs page: its name and the link to its page.
ROW = re.compile(r'<tr class="job[^"]*" data-job="([^"]*)">\s*<td class="name"><a href="([^"]+)"')
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class Answer:
    """An HTTP answer: status, headers, body."""

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


class _Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an answer to look at, not to follow


class Browser:
    """Requests to the server with a cookie jar, redirects not followed."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), _Stay())

    def request(self, method: str, path: str, body: Optional[bytes] = None, content_type: str = "") -> Answer:
        headers = {"Content-Type": content_type} if content_type else {}
        request = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=20) as answer:
                return Answer(answer.status, answer.headers, answer.read())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.headers, exc.read())

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def form(self, path: str, fields: Dict[str, str]) -> Answer:
        return self.request("POST", path, urlencode(fields).encode(), "application/x-www-form-urlencoded")

    def api(self, method: str, path: str, body: Any = None) -> Answer:
        return self.request(method, path, json.dumps(body or {}).encode(), "application/json")

    def cookies(self) -> Dict[str, str]:
        return {cookie.name: cookie.path for cookie in self.jar}

    def log_in(self, user: str, password: str) -> None:
        page = self.get("/login/")
        token = TOKEN.search(page.text)
        assert token, page.text
        answer = self.form("/login/", {"csrfmiddlewaretoken": token.group(1), "username": user, "password": password})
        assert answer.status == 302, answer.text


class Site:
    """The test project served by gunicorn on a free loopback port, with its users."""

    def __init__(self, project: Project) -> None:
        self.project = project
        project.migrate()
        project.ok("shell", "-c", USERS)
        env = {**project.env, "DJANGO_SETTINGS_MODULE": "settings"}
        server = Process(["-m", "gunicorn", "--bind", "127.0.0.1:0", "--workers", "1", "--threads", "2",
                          "django.core.wsgi:get_wsgi_application()"], PROJECT, env)  # fmt: skip
        self.server = server
        line = server.lines[server.wait_line(LISTENING, timeout=30)]
        self.base = "http://127.0.0.1:" + re.search(LISTENING, line).group(1)  # type: ignore[union-attr]

    def close(self) -> None:
        self.server.kill()

    def browser(self, user: Optional[str] = None) -> Browser:
        """A browser, logged in as ``user`` (``None``: anonymous)."""
        browser = Browser(self.base)
        if user is not None:
            browser.log_in(user, f"pw-{user}")
        return browser

    def state(self, job: str) -> Any:
        """The job's state in the project's store."""
        store = open_store(json.loads(self.project.env["LEASECRON_SETTING"])["STORE"])
        try:
            return store.job_state(job)
        finally:
            store.close()


@pytest.fixture
def site(project: Project) -> Iterator[Site]:
    made = Site(project)
    yield made
    made.close()


def page_token(browser: Browser, path: str) -> Tuple[Answer, str]:
    """The page at ``path`` and the CSRF token its forms carry."""
    page = browser.get(path)
    assert page.status == 200, page.text
    token = TOKEN.search(page.text)
    assert token, page.text
    return page, token.group(1)


def test_staff_see_the_pages_and_the_api(site: Site) -> None:
    """A staff user gets the jobs page, a job's page and the API under /cron/, with the project's
    registered job and its schedule (the project's cron), links and cookies under /cron/, and the
    forms carrying Django's CSRF token (the dashboard sets no CSRF cookie of its own)."""
    alice = site.browser("alice")
    page, _ = page_token(alice, "/cron/")
    assert "shop.tick" in page.text and "every 1h 00m" in page.text
    assert 'href="/cron/jobs/shop.tick"' in page.text and 'href="/cron/static/dashboard.css"' in page.text
    assert 'name="csrf_token"' not in page.text
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert "leasecron_csrf" not in alice.cookies() and "csrftoken" in alice.cookies()
    assert alice.get("/cron/jobs/shop.tick").status == 200
    assert alice.get("/cron/static/dashboard.css").headers["Content-Type"].startswith("text/css")
    jobs = alice.get("/cron/api/jobs")
    assert jobs.status == 200 and jobs.headers["Content-Type"] == "application/json"
    found = {job["job"]: job for job in jobs.json()["jobs"]}
    assert found["shop.tick"]["registered"] is True and found["shop.tick"]["schedule"] == "every 1h 00m"
    assert alice.get("/cron/api/jobs/nothing%2Fhere/runs").json()["job"] == "nothing/here"
    assert alice.get("/cron/api/nowhere").status == 404


@pytest.mark.parametrize("user", [None, "bob"])
def test_others_are_sent_to_the_login_page_and_refused_by_the_api(site: Site, user: Optional[str]) -> None:
    """Anonymous and non-staff users: each page (and a form's POST) answers 302 to LOGIN_URL with
    ?next=; the API answers 403 with a JSON error, for reads and writes; nothing is stored."""
    browser = site.browser(user)
    for path in ("/cron/", "/cron/jobs/shop.tick?status=failed", "/cron/static/dashboard.css"):
        answer = browser.get(path)
        assert (answer.status, answer.headers["Location"]) == (302, f"/login/?next={quote(path, safe='/')}")
    for method, path in (("GET", "/cron/api/jobs"), ("POST", "/cron/api/jobs/shop.tick/pause")):
        answer = browser.api(method, path) if method == "POST" else browser.get(path)
        assert answer.status == 403 and "staff" in answer.json()["error"]
    _, token = page_token(browser, "/login/")
    answer = browser.form("/cron/jobs/shop.tick/pause", {"csrfmiddlewaretoken": token, "next": "/cron/"})
    assert (answer.status, answer.headers["Location"]) == (302, "/login/?next=/cron/jobs/shop.tick/pause")
    assert site.state("shop.tick").paused is False


@pytest.mark.parametrize("middleware", ["1", "0"], ids=["csrf-middleware", "no-csrf-middleware"])
def test_forms_need_djangos_csrf_token_and_act_as_the_django_user(
    project: Project, request: pytest.FixtureRequest, middleware: str
) -> None:
    """A form's POST without Django's token is refused by Django (403; also in a project without
    CsrfViewMiddleware), with it the action is stored under the user's name and answers 303 back to
    the page; the API needs no token but an application/json body (a form's type: 415), and acts
    under the same name; a job name with a slash and non-ASCII letters goes through the mount and
    back."""
    project.set(json.loads(project.env["LEASECRON_SETTING"]), SHOP_CSRF_MIDDLEWARE=middleware)
    site = Site(project)
    request.addfinalizer(site.close)
    alice = site.browser("alice")
    refused = alice.form("/cron/jobs/shop.tick/pause", {"note": "no token", "next": "/cron/jobs/shop.tick"})
    assert refused.status == 403 and "CSRF" in refused.text
    assert site.state("shop.tick").paused is False

    _, token = page_token(alice, "/cron/jobs/shop.tick")
    fields = {"csrfmiddlewaretoken": token, "note": "maintenance", "next": "/cron/jobs/shop.tick"}
    done = alice.form("/cron/jobs/shop.tick/pause", fields)
    assert (done.status, done.headers["Location"]) == (303, "/cron/jobs/shop.tick")
    state = site.state("shop.tick")
    assert (state.paused, state.paused_by, state.note) == (True, "alice", "maintenance")
    assert "Paused job &#39;shop.tick&#39; (by alice)" in alice.get("/cron/jobs/shop.tick").text

    assert alice.form("/cron/api/jobs/shop.tick/resume", {"csrfmiddlewaretoken": token}).status == 415
    assert alice.api("POST", "/cron/api/jobs/shop.tick/resume").status == 200
    assert site.state("shop.tick").paused is False

    for name in HOSTILE:
        quoted = quote(name, safe="")
        assert alice.api("POST", f"/cron/api/job/pause?job={quoted}", {"note": "api"}).status == 200, name
        assert (site.state(name).paused, site.state(name).paused_by) == (True, "alice"), name
        assert alice.get(f"/cron/api/job/runs?job={quoted}").json()["job"] == name
        rows = ROW.findall(alice.get(f"/cron/?q={quoted}").text)
        links = [html.unescape(href) for job, href in rows if html.unescape(job) == name]
        assert len(links) == 1 and links[0].startswith("/cron/job"), (name, rows)
        page, token = page_token(alice, links[0])  # the job's page, from its link on the jobs page
        resume = re.search(r'<form class="action resume" method="post" action="([^"]+)"', page.text)
        assert resume, (name, page.text)
        assert alice.form(html.unescape(resume.group(1)), {"csrfmiddlewaretoken": token}).status == 303, name
        assert site.state(name).paused is False, name


def test_read_only_hides_the_forms_and_refuses_every_write(project: Project, request: pytest.FixtureRequest) -> None:
    """LEASECRON_DASHBOARD = {"read_only": True}: no form on the pages; a form's POST (with
    Django's token) and the API's writes answer 403; nothing is stored."""
    project.set(json.loads(project.env["LEASECRON_SETTING"]), LEASECRON_DASHBOARD_SETTING='{"read_only": true}')
    site = Site(project)
    request.addfinalizer(site.close)
    alice = site.browser("alice")
    page = alice.get("/cron/jobs/shop.tick")
    assert page.status == 200 and "<form class=\"action" not in page.text
    _, token = page_token(alice, "/login/")  # the dashboard's pages have no form that carries one
    refused = alice.form("/cron/jobs/shop.tick/pause", {"csrfmiddlewaretoken": token, "next": "/cron/"})
    assert refused.status == 403 and "read-only" in refused.text
    answer = alice.api("POST", "/cron/api/jobs/shop.tick/pause")
    assert answer.status == 403 and "read-only" in answer.json()["error"]
    assert alice.api("PUT", "/cron/api/jobs/shop.tick/schedule", {"schedule": "*/5 * * * *"}).status == 403
    assert site.state("shop.tick").paused is False


def test_a_bad_dashboard_setting_is_named() -> None:
    """LEASECRON_DASHBOARD must be a dict of read_only (a bool) and refresh_ms (0 to an hour);
    anything else is a ConfigError naming the setting and the key."""
    assert dashboard_options(None) == {}
    assert dashboard_options({"read_only": True, "refresh_ms": 0}) == {"read_only": True, "refresh_ms": 0}
    for value, words in (
        ([1], "must be a dict"),
        ({"readonly": True}, "unknown key 'readonly'"),
        ({"read_only": "yes"}, "settings.LEASECRON_DASHBOARD: dashboard: read_only must be True or False, not 'yes'"),
        ({"refresh_ms": -1}, "settings.LEASECRON_DASHBOARD: dashboard: refresh_ms must be an integer from 0"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            dashboard_options(value)


def test_manage_py_check_fails_on_a_bad_dashboard_setting(project: Project) -> None:
    """The URLconf checks LEASECRON_DASHBOARD when it is imported: `manage.py check` fails naming it."""
    project.set(json.loads(project.env["LEASECRON_SETTING"]), LEASECRON_DASHBOARD_SETTING='{"read_only": "yes"}')
    done = project.manage("check")
    assert done.returncode != 0
    assert "settings.LEASECRON_DASHBOARD: dashboard: read_only must be True or False" in done.stderr
