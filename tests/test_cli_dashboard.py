"""``leasecron dashboard`` as a real process on a real SQLite store, over HTTP on loopback: both
servers (gunicorn, and Werkzeug's when gunicorn cannot be imported), the checks that come before
anything is bound or opened, read-only, the password, ``--app``; the example that mounts the
blueprint in an app behind its own login; and docs/dashboard.rst."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import signal
import socket
import sqlite3
import sys
import textwrap
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote

import pytest

import leasecron
from leasecron.cli.dashboard import PASSWORD_ENV, check_listen, is_loopback, password_from
from leasecron.errors import ConfigError

from .cli_support import ROOT, Process, copy_example, environment, run

pytestmark = [pytest.mark.processes, pytest.mark.timeout(60)]

#: ``python -c`` code that runs the ``leasecron`` command with gunicorn made unimportable in that
#: process (``None`` in ``sys.modules`` makes ``import gunicorn`` raise ImportError), as on a host
#: without gunicorn: the command falls back to Werkzeug's server.
WITHOUT_GUNICORN = (
    "import sys; sys.modules['gunicorn'] = None; from leasecron.cli import main; sys.exit(main(sys.argv[1:]))"
)
#: The same with Flask made unimportable: the ``dashboard`` extra is not installed.
WITHOUT_FLASK = WITHOUT_GUNICORN.replace("gunicorn", "flask")
SERVERS = {"gunicorn": ["-m", "leasecron"], "werkzeug": ["-c", WITHOUT_GUNICORN]}
STARTED = r"^leasecron dashboard on (http://\S+/) \((.*)\); SIGTERM or Ctrl-C stops it$"

Response = Tuple[int, Dict[str, str], bytes]


def http(url: str, data: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None) -> Response:
    """One request (a POST when ``data`` is given): status, headers and body, errors included."""
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def basic(user: str, password: str) -> Dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def make_store(tmp_path: Path) -> Tuple[str, int]:
    """A SQLite store with real runs of "alpha" (success, failed) and "beta" (running); its URL
    and the newest slot of alpha."""
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    with leasecron.open_store(url) as store:
        base = (store.now_ms() // 60_000 - 3) * 60_000
        for i, status in enumerate(("success", "failed")):
            run_ = store.claim("alpha", base + i * 60_000, runner=f"host-{i}", max_late_ms=3_600_000).run
            assert store.finish("alpha", run_.slot_ms, run_.token, status, "boom" if status == "failed" else None)
        assert store.claim("beta", base, runner="host-9", max_late_ms=3_600_000, lease_ms=60_000).won
    return url, base + 60_000


class Dashboard:
    """A running ``leasecron dashboard`` process and the URL it printed."""

    def __init__(self, args: List[str], cwd: Path, env: Dict[str, str], server: str = "gunicorn") -> None:
        self.process = Process([*SERVERS[server], "dashboard", *args, "--port", "0"], cwd, env)
        index = self.process.wait_line(STARTED)
        match = re.match(STARTED, self.process.lines[index])
        assert match is not None
        self.url, self.about = match.group(1), match.group(2)

    def get(self, path: str, headers: Optional[Dict[str, str]] = None) -> Response:
        return http(self.url + path, headers=headers)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum``; the exit code, which must come within 10 s."""
        self.process.signal(signum)
        return self.process.finish(timeout=10)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    """``start(args, server=..., env=...)`` starts a dashboard in ``tmp_path``; all are killed at the end."""
    started: List[Dashboard] = []

    def _start(args: List[str], server: str = "gunicorn", env: Optional[Dict[str, str]] = None) -> Dashboard:
        started.append(Dashboard(args, tmp_path, env if env is not None else environment(), server))
        return started[-1]

    yield _start
    for dashboard in started:
        dashboard.process.kill()


# -- both servers: pages, API, a clean stop ---------------------------------------------------


@pytest.mark.parametrize("server, signum", [("gunicorn", signal.SIGTERM), ("gunicorn", signal.SIGINT),
                                            ("werkzeug", signal.SIGTERM), ("werkzeug", signal.SIGINT)])  # fmt: skip
def test_serves_the_store_and_stops_on_a_signal(server: str, signum: int, tmp_path: Path, start: Any) -> None:
    """The jobs page and /api/jobs show the store's jobs and runs, from gunicorn (1 worker, threads)
    or, without gunicorn, Werkzeug's server; SIGTERM and SIGINT stop it with exit 0."""
    url, newest = make_store(tmp_path)
    dashboard = start([url], server=server)
    expected = "gunicorn, 1 worker, 4 threads" if server == "gunicorn" else "Werkzeug's threaded server"
    assert dashboard.about.endswith(expected) and "actions allowed; no password" in dashboard.about
    assert dashboard.url.startswith("http://127.0.0.1:")

    status, _, body = dashboard.get("")
    assert status == 200
    page = body.decode()
    assert '<tr class="job" data-job="alpha"' in page and '<tr class="job" data-job="beta"' in page
    assert f'data-slot="{newest}"' in page and 'class="action pause"' in page

    status, headers, body = dashboard.get("api/jobs")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    jobs = {job["job"]: job for job in json.loads(body)["jobs"]}
    assert sorted(jobs) == ["alpha", "beta"]
    assert [(r["slot_ms"], r["status"]) for r in jobs["alpha"]["runs"]] == [(newest, "failed"),
                                                                           (newest - 60_000, "success")]
    assert [r["status"] for r in jobs["beta"]["runs"]] == ["running"] and not jobs["alpha"]["paused"]

    assert dashboard.stop(signum) == 0
    assert dashboard.process.lines[-1] == "leasecron dashboard stopped", dashboard.process.stderr()


# -- read-only, password -----------------------------------------------------------------------


def test_read_only_shows_no_forms_and_refuses_every_post(tmp_path: Path, start: Any) -> None:
    """--read-only: the pages have no action form; a POST, form or API, is 403 and changes nothing."""
    url, _ = make_store(tmp_path)
    dashboard = start([url, "--read-only"])
    assert dashboard.about.startswith("read-only;")
    status, _, body = dashboard.get("")
    assert status == 200 and 'data-job="alpha"' in body.decode() and 'class="action' not in body.decode()
    for action in ("pause", "resume", "trigger"):
        form = http(f"{dashboard.url}jobs/alpha/{action}", data=b"note=x&csrf_token=t&next=/")
        api = http(f"{dashboard.url}api/jobs/alpha/{action}", data=b'{"note": "x"}',
                   headers={"Content-Type": "application/json"})  # fmt: skip
        assert (form[0], api[0]) == (403, 403), (action, form, api)
    with leasecron.open_store(url, create=False) as store:
        state = store.job_state("alpha")
        assert not state.paused and not state.requests


def test_password_from_the_option_or_the_environment(tmp_path: Path, start: Any) -> None:
    """With a password, every page and endpoint answers 401 with a Basic challenge without it (or
    with a wrong one), and 200 with it, whatever the user name; the environment variable works too."""
    url, _ = make_store(tmp_path)
    with_env = environment()
    with_env[PASSWORD_ENV] = "from-env"
    for args, env, password in (([url, "--password", "s3cret"], environment(), "s3cret"),
                                ([url], with_env, "from-env")):  # fmt: skip
        dashboard = start(args, env=env)
        assert "password required" in dashboard.about
        for path in ("", "jobs/alpha", "api/jobs", "static/dashboard.css"):
            status, headers, _ = dashboard.get(path)
            assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="leasecron"', path
            assert dashboard.get(path, basic("ops", password + "x"))[0] == 401, path
            assert dashboard.get(path, basic("anyone", password))[0] == 200, path
        assert password not in " ".join(dashboard.process.lines)
        assert dashboard.stop() == 0


# -- --app ---------------------------------------------------------------------------------------

APP_MODULE = """
import os

import leasecron

cron = leasecron.LeaseCron(os.environ["LEASECRON_STORE"], runner="ops")


@cron.job("*/5 * * * *", name="tick")
def tick(ctx):
    pass
"""


class _Cells(HTMLParser):
    """The text of each ``td`` (by its class) in the ``tr`` of the jobs table whose data-job is ``job``."""

    def __init__(self, job: str) -> None:
        super().__init__()
        self.job = job
        self.cells: Dict[str, str] = {}
        self._row = False
        self._cell: Optional[str] = None

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        found = dict(attrs)
        if tag == "tr":
            self._row = found.get("data-job") == self.job
        elif tag == "td" and self._row:
            self._cell = (found.get("class") or "").split()[0]
            self.cells[self._cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self.cells[self._cell] += data


def test_app_adds_the_schedules(tmp_path: Path, start: Any) -> None:
    """--app module:attr (the URL left out: the app's store) shows a registered job's schedule and
    next slot, in the page and in the API, though the job never ran."""
    url, _ = make_store(tmp_path)
    (tmp_path / "opsmod.py").write_text(textwrap.dedent(APP_MODULE))
    dashboard = start(["--app", "opsmod:cron"], env=environment(url))
    assert dashboard.about.startswith("actions allowed; no password; store SQLiteStore(")
    assert ", jobs of opsmod:cron;" in dashboard.about
    status, _, body = dashboard.get("api/jobs")
    with leasecron.open_store(url, create=False) as store:
        now = store.now_ms()
    tick = {job["job"]: job for job in json.loads(body)["jobs"]}["tick"]
    assert status == 200 and tick["schedule"] == "*/5 * * * *" and tick["runs"] == []
    assert tick["next_slot_ms"] % 300_000 == 0 and now < tick["next_slot_ms"] <= now + 300_000
    cells = _Cells("tick")
    cells.feed(dashboard.get("")[2].decode())
    assert cells.cells["schedule"].strip() == "*/5 * * * *" and cells.cells["next"].strip(), cells.cells


# -- what is checked before anything is bound or opened ---------------------------------------


def test_a_host_that_is_not_loopback_needs_a_password(tmp_path: Path) -> None:
    """--host 0.0.0.0 without a password exits 2 naming the fix, before it imports Flask or opens
    the store (a missing file is not the error, and stays missing); an empty variable is no password."""
    missing = tmp_path / "missing.db"
    env = environment()
    env[PASSWORD_ENV] = ""
    for host in ("0.0.0.0", "::", "192.0.2.1", "example.com"):
        result = run(["-c", WITHOUT_FLASK, "dashboard", f"sqlite:///{missing}", "--host", host], tmp_path, env)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"leasecron dashboard: error: --host {host} is not a loopback address, and the dashboard would be open"
            f" to anyone who reaches it: set {PASSWORD_ENV} (or give --password TEXT) to require HTTP basic"
            " authentication, or listen on 127.0.0.1"
        ]
    assert not missing.exists()


def test_listen_checks() -> None:
    """Loopback is 127.0.0.0/8, ::1 and localhost; any other host needs a password; bad values are
    ConfigErrors naming the option."""
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "fe80::1", "localhost.example.com"))
    assert check_listen("[::1]", 0, None) == "::1"
    assert check_listen("0.0.0.0", 8080, "pw") == "0.0.0.0"
    for host, port, message in (("", 80, "--host must be"), ("127.0.0.1", 70000, "--port must be 0-65535"),
                                ("10.1.2.3", 80, "not a loopback address")):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            check_listen(host, port, None)
    assert password_from("a", {PASSWORD_ENV: "b"}) == "a" and password_from(None, {PASSWORD_ENV: "b"}) == "b"
    assert password_from(None, {PASSWORD_ENV: ""}) is None and password_from(None, {}) is None
    with pytest.raises(ConfigError, match="--password must not be empty"):
        password_from("", {})


def test_without_flask_one_line_names_the_extra(tmp_path: Path) -> None:
    """Without Flask (the extra not installed): exit 2 and one line with the pip command."""
    url, _ = make_store(tmp_path)
    result = run(["-c", WITHOUT_FLASK, "dashboard", url, "--port", "0"], tmp_path, environment())
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "leasecron dashboard: error: the dashboard needs Flask, which is not installed:"
        " pip install 'leasecron[dashboard]'"
    ]


def test_a_port_in_use_is_one_line_at_once(tmp_path: Path) -> None:
    """A port another program listens on: exit 1 with one line naming it, without gunicorn's retries."""
    url, _ = make_store(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(["-m", "leasecron", "dashboard", url, "--port", str(port)], tmp_path, environment(), timeout=4)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"leasecron dashboard: error: cannot listen on http://127.0.0.1:{port}/: Address already in use"
    ]


def test_the_command_line_imports_no_flask() -> None:
    """The core and the command line import neither Flask nor a server until the command runs."""
    code = (
        "import sys, leasecron, leasecron.cli, leasecron.cli.dashboard; leasecron.cli.build_parser();"
        " print(sorted(m for m in sys.modules if m.split('.')[0] in ('flask', 'werkzeug', 'jinja2', 'gunicorn')))"
    )
    result = run(["-c", code])
    assert (result.returncode, result.stdout.strip()) == (0, "[]"), result.stderr


def test_a_store_without_schema_is_an_error_and_stays_so(tmp_path: Path) -> None:
    """A missing SQLite file, or one without the table, is exit 1 saying so; nothing is created."""
    missing = tmp_path / "missing.db"
    result = run(["-m", "leasecron", "dashboard", f"sqlite:///{missing}", "--port", "0"], tmp_path, environment())
    assert result.returncode == 1 and f"SQLite database file '{missing}' does not exist" in result.stderr
    assert "`leasecron dashboard` creates no store" in result.stderr and not missing.exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    result = run(["-m", "leasecron", "dashboard", f"sqlite:///{empty}", "--port", "0"], tmp_path, environment())
    assert result.returncode == 1, result.stderr
    assert f"SQLite table 'leasecron_runs' does not exist in '{empty}'" in result.stderr
    assert "`leasecron dashboard` creates no store (check the URL, or start an instance" in result.stderr
    with sqlite3.connect(empty) as conn:
        assert conn.execute("select name from sqlite_master").fetchall() == []


# -- the example: the blueprint in an app behind its own login --------------------------------


def load_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """examples/dashboard/app.py, copied unchanged and imported with its environment set."""
    path = copy_example("dashboard/app.py", tmp_path)
    monkeypatch.setenv("LEASECRON_STORE", f"sqlite:///{tmp_path / 'example.db'}")
    monkeypatch.setenv("SECRET_KEY", "example-secret")
    monkeypatch.setenv("OPS_PASSWORD", "ops-password")
    spec = importlib.util.spec_from_file_location("dashboard_example_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_mounts_the_dashboard_behind_the_apps_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's app sends a visitor to its login page and an API client 401; once logged in as
    its operator, /cron/ shows the job with its schedule and the API triggers a run."""
    example = load_example(tmp_path, monkeypatch)
    try:
        client = example.create_app().test_client()
        response = client.get("/cron/")
        assert response.status_code == 302 and response.headers["Location"].endswith("/login")
        assert client.get("/cron/api/jobs").status_code == 401
        assert client.post("/login", data={"user": "ops", "password": "wrong"}).status_code == 200
        assert client.get("/cron/api/jobs").status_code == 401
        response = client.post("/login", data={"user": "ops", "password": "ops-password"})
        assert response.status_code == 302 and response.headers["Location"].endswith("/cron/")
        page = client.get("/cron/")
        assert page.status_code == 200 and 'data-job="cleanup"' in page.get_data(as_text=True)
        jobs = client.get("/cron/api/jobs").get_json()["jobs"]
        assert [(job["job"], job["schedule"]) for job in jobs] == [("cleanup", "*/5 * * * *")]
        answer = client.post(f"/cron/api/jobs/{quote('cleanup', safe='')}/trigger", json={})
        assert answer.status_code == 200, answer.get_data(as_text=True)
        [request] = example.cron.store.job_state("cleanup").requests
        assert request.slot_ms == answer.get_json()["slot_ms"]
    finally:
        example.cron.store.close()


# -- docs/dashboard.rst ------------------------------------------------------------------------


def test_docs_page_is_valid_rst() -> None:
    """docs/dashboard.rst parses with docutils without a warning; its literalinclude names a file that
    exists (docutils has no literalinclude, a Sphinx directive: a stand-in reads the file); it shows
    the three screenshots."""
    from docutils import core, nodes  # the test extra installs docutils
    from docutils.parsers.rst import Directive, directives, roles

    class LiteralInclude(Directive):
        required_arguments = 1
        option_spec = {"language": directives.unchanged, "caption": directives.unchanged}

        def run(self) -> List[Any]:
            path = ROOT / "docs" / self.arguments[0]
            assert path.is_file(), path
            return [nodes.literal_block(text=path.read_text(encoding="utf-8"))]

    directives.register_directive("literalinclude", LiteralInclude)
    roles.register_generic_role("func", nodes.literal)  # Sphinx's roles, as plain literals
    roles.register_generic_role("doc", nodes.literal)
    text = (ROOT / "docs" / "dashboard.rst").read_text(encoding="utf-8")
    doctree = core.publish_doctree(
        text, settings_overrides={"halt_level": 2, "report_level": 2, "warning_stream": sys.stderr}
    )
    images = [node["uri"] for node in doctree.findall(nodes.image)]
    assert images == [f"_static/dashboard-{page}.png" for page in ("jobs", "job", "run", "instances")]
