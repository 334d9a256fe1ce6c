"""examples/dashboard/wsgi.py (shown by docs/dashboard.rst), served by gunicorn with the command
line of its docstring: two worker processes serve the same read-only dashboard."""

from __future__ import annotations

import json
import re
import shlex
import signal
from pathlib import Path

import pytest

import leasecron
from tests.cli_support import EXAMPLES, Process, copy_example, environment
from tests.test_cli_dashboard import http

pytestmark = [pytest.mark.processes, pytest.mark.timeout(60)]

LISTENING = r"Listening at: (http://127\.0\.0\.1:\d+) "


def docstring_command() -> list:
    """The gunicorn command line the example's docstring gives, as arguments after ``gunicorn``."""
    text = (EXAMPLES / "dashboard" / "wsgi.py").read_text(encoding="utf-8")
    [line] = [line for line in text.splitlines() if " gunicorn " in line]
    words = shlex.split(line)
    assert words[0].startswith("LEASECRON_STORE=") and words[1] == "gunicorn", words
    return words[2:]


def test_gunicorn_serves_the_example_read_only_from_every_worker(tmp_path: Path) -> None:
    """With the docstring's options (port 0 for a free one), the jobs page (without action forms) and the API
    show the store's runs; a POST of an action is refused (403, read-only) and changes nothing; SIGTERM stops it."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    with leasecron.open_store(url) as store:
        slot = (store.now_ms() // 60_000 - 1) * 60_000
        run = store.claim("report", slot, runner="web-1", max_late_ms=3_600_000).run
        assert store.finish("report", slot, run.token, "success", None)
    args = docstring_command()
    assert args[args.index("-w") + 1] == "2" and args[-1] == "wsgi:app", args
    args[args.index("-b") + 1] = "127.0.0.1:0"
    copy_example("dashboard/wsgi.py", tmp_path)
    env = {**environment(url), "HOME": str(tmp_path)}  # gunicorn's control socket goes under $HOME
    server = Process(["-m", "gunicorn", *args], tmp_path, env)
    try:
        match = re.search(LISTENING, server.lines[server.wait_line(LISTENING)])
        assert match is not None
        base = match.group(1)
        for _ in range(4):  # requests spread over the two workers; each answers the same
            status, _, body = http(base + "/api/jobs")
            assert status == 200, body
            [job] = json.loads(body)["jobs"]
            assert job["job"] == "report" and job["runs"][0]["status"] == "success", job
        status, _, page = http(base + "/")
        assert status == 200 and b'data-job="report"' in page and b'class="action' not in page
        status, _, _ = http(base + "/api/jobs/report/pause", b"{}", {"Content-Type": "application/json"})
        assert status == 403
        with leasecron.open_store(url, create=False) as store:
            assert not store.job_state("report").paused
        server.signal(signal.SIGTERM)
        assert server.finish(timeout=20) == 0, server.stderr()
    finally:
        server.kill()
