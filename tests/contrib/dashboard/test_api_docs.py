"""The JSON API as docs/dashboard.rst shows it: each ``curl`` of the page, sent to a real dashboard,
answers with every key the page's sample answer shows.

The samples shorten their answers with ``...``, so they are not JSON; what
can rot is a key that the API no longer has, or a path, method or body it no
longer takes. Each ``$ curl`` line (with its ``\\`` continuations) is turned
into the same request to a Flask test client of ``create_app`` on a SQLite
store holding a running ``report`` and a failed ``nightly report``.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, List, Set, Tuple
from urllib.parse import urlsplit

from leasecron import LeaseCron, Store
from leasecron.announcements import announcement_of
from leasecron.contrib.dashboard import create_app
from tests.contrib.dashboard.conftest import claim
from tests.docs.readme_examples import DOCS
from tests.test_cli_dashboard import STARTED

PAGE = DOCS / "dashboard.rst"
#: The keys of an answer whose values the page's samples show as the API gives them.
SCHEDULE_KEYS = ("version", "source", "schedule", "tz", "task", "name")


def curl_samples() -> List[Tuple[List[str], str]]:
    """(curl's arguments, the sample answer below it) for each ``$ curl`` of the page."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    samples = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line.startswith("$ curl "):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        answer = []
        while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith("$"):
            answer.append(lines[i].strip())
            i += 1
        samples.append((shlex.split(line[2:])[1:], " ".join(answer)))
    return samples


def keys_of(value: Any) -> Set[str]:
    """Every key of every object in a JSON value."""
    if isinstance(value, dict):
        return set(value).union(*(keys_of(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_of(item) for item in value))
    return set()


def make_store(tmp_path: Path) -> Tuple[Store, LeaseCron]:
    """A SQLite store with a running ``report`` and a failed ``nightly report``, a cron registering
    both, and a live instance ``web-1-4242`` that registers ``report`` and the task ``send_report``."""
    cron = LeaseCron(f"sqlite:///{tmp_path / 'leasecron.db'}", runner="web-1")
    for name in ("report", "nightly report"):
        cron.add_job(lambda: None, "*/5 * * * *", name=name)
    store = cron.store
    slot = (store.now_ms() // 300_000 - 1) * 300_000
    claim(store, "report", slot, runner="web-1-4242")
    failed = claim(store, "nightly report", slot, runner="web-2")
    assert store.finish("nightly report", slot, failed.token, "failed", "KeyError: 'account'")
    store.announce(announcement_of("web-1-4242", "web-1", 4242, "0.3.0", [("report", "*/5 * * * *", "UTC")],
                                   ["send_report"]))  # fmt: skip
    return store, cron


def test_every_curl_of_the_page_answers_with_the_keys_it_shows(tmp_path: Path) -> None:
    """GET /api/jobs, a job's runs, pause, resume and trigger; the live instances; a schedule
    overridden and reset; a stored job put, listed, read and deleted: status 200, and the
    sample's keys are all in the real answer (the page's resume shows no answer: it must still
    succeed)."""
    samples = curl_samples()
    assert len(samples) == 12, samples
    store, cron = make_store(tmp_path)
    http = create_app(store, cron=cron).test_client()
    for args, sample in samples:
        method = args[args.index("-X") + 1] if "-X" in args else "GET"
        body = args[args.index("-d") + 1] if "-d" in args else None
        [url] = [arg for arg in args if arg.startswith("http://")]
        parts = urlsplit(url)
        assert (parts.hostname, parts.port) == ("127.0.0.1", 8080), url
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        if method == "GET":
            response = http.get(path)
        else:
            assert method in ("POST", "PUT", "DELETE") and "Content-Type: application/json" in args, args
            response = http.open(path, method=method, data=body, content_type="application/json")
        assert response.status_code == 200, (args, response.get_data(as_text=True))
        shown = set(re.findall(r'"(\w+)":', sample))
        missing = shown - keys_of(response.get_json())
        assert not missing, f"{' '.join(args)}: the page shows keys the API does not answer: {sorted(missing)}"
        answer = response.get_json()
        for key, value in re.findall(r'"(\w+)": ("[^"]*"|\d+|null)', sample):  # the schedule's values shown are real
            if key in SCHEDULE_KEYS and isinstance(answer, dict) and key in answer:
                assert answer[key] == json.loads(value), (" ".join(args), key, answer[key], value)
    assert store.job_state("report").requests, "the page's trigger asked for a run"
    record = store.stored_schedule("report-team-3")
    assert record is not None and (record.source, record.version) == ("code", 2), "the page's stored job was deleted"
    store.close()


def test_the_startup_line_the_page_shows_is_the_one_the_command_prints() -> None:
    """The line the page shows for ``leasecron dashboard ... --read-only`` has the shape the command's
    tests expect (tests/test_cli_dashboard.py), and says read-only."""
    text = PAGE.read_text(encoding="utf-8")
    [line] = [line.strip() for line in text.splitlines() if line.strip().startswith("leasecron dashboard on ")]
    match = re.match(STARTED, line)
    assert match is not None and match.group(2).startswith("read-only;"), line
