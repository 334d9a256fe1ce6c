"""The dashboard in a real Chromium, while three instances run the app of ``conftest.py``.

Each test drives the pages as a person would (it reads the elements the dashboard contract
names, types into the forms, clicks their buttons) and checks the outcome twice: in the page
and in the store the instances share. Every wait is a deadline on a condition
(``WebDriverWait``, :func:`tests.helpers.wait_for`), never a fixed sleep. The page's data is
read with one script call returning plain values, so a live refresh of the page between two
reads never leaves the test holding a stale element.

The screenshots of the four pages in ``docs/_static`` are checked to be current by
:func:`test_screenshots_are_current`; its docstring says how.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import struct
import urllib.request
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest

from leasecron.runs import LATE_TOLERANCE_MS
from tests.cli_support import ROOT
from tests.helpers import wait_for

from .conftest import BROWSER_TZ, WINDOW, Site

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = [pytest.mark.processes, pytest.mark.timeout(60)]

#: How long a page gets to show what a test waits for (the store's side has its own deadlines).
PAGE_TIMEOUT = 10.0
#: Who the dashboard records as pausing a job: no basic-auth user, this host.
BY = f"dashboard@{socket.gethostname()}"

# One script per kind of read: it returns plain values (no element handles, which a live refresh
# would make stale). The job is an argument, compared with data-job, never put into a selector.
ROW_JS = r"""
const row = Array.from(document.querySelectorAll('table#jobs tr.job')).find(r => r.dataset.job === arguments[0]);
if (!row) return null;
const text = sel => { const e = row.querySelector(sel); return e ? e.textContent.trim() : null; };
return {
  paused: row.classList.contains('paused'),
  pause: text('td.pause'),
  note: text('td.pause .note'),
  marks: Array.from(row.querySelectorAll('td.marks a.mark')).map(
    a => ({slot: Number(a.dataset.slot), cls: a.className, href: a.getAttribute('href')})),
  live: Array.from(row.querySelectorAll('td.live span.live-run')).map(
    s => ({slot: Number(s.dataset.slot), left: Number(s.dataset.leaseLeftMs)})),
  expired: Array.from(row.querySelectorAll('td.name .expired-request')).map(e => ({
    text: e.textContent.replace(/\s+/g, ' ').trim(), slot: Number(e.dataset.slot),
    ms: Number(e.querySelector('time').dataset.ms)}))[0] || null,
};
"""
RUNS_JS = """
return Array.from(document.querySelectorAll('section.run')).map(s => ({
  slot: Number(s.dataset.slot), status: s.dataset.status,
  attempts: Array.from(s.querySelectorAll('ol.timeline li.attempt')).map(
    li => ({cls: li.className, number: Number(li.dataset.number), runner: li.dataset.runner})),
}));
"""
TIMES_JS = """
return Array.from(document.querySelectorAll('time[data-ms]')).map(t => ({
  text: t.textContent.trim(), title: t.getAttribute('title'), datetime: t.getAttribute('datetime'),
  ms: Number(t.dataset.ms)}));
"""
FLASH_JS = "return Array.from(document.querySelectorAll('.flash')).map(e => e.textContent.trim());"


def job_path(job: str) -> str:
    """A job page's path, the name percent-encoded as the dashboard's links do."""
    return "/jobs/" + quote(job, safe="")


def until(
    browser: "WebDriver", condition: Callable[["WebDriver"], Any], what: str, timeout: float = PAGE_TIMEOUT
) -> Any:
    """Wait for ``condition(browser)`` to return a true value (returned); fail naming ``what``."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, timeout, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,))
    try:
        return wait.until(condition)
    except TimeoutException:
        pytest.fail(f"the page did not show {what} within {timeout} s; it is {browser.current_url}:\n"
                    f"{browser.find_element('tag name', 'body').text[:3000]}")  # fmt: skip


def row(browser: "WebDriver", job: str) -> Optional[Dict[str, Any]]:
    """What the jobs page shows of ``job`` (None without its row)."""
    return browser.execute_script(ROW_JS, job)


def click_in_row(browser: "WebDriver", job: str, css: str, note: Optional[str] = None) -> None:
    """Click the element ``css`` in ``job``'s row of the jobs page, typing ``note`` into the ``note``
    field of its form first. A live refresh may replace the row between finding the element and
    clicking it (dashboard.js holds off only while a field has focus or text): then again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def clicked(b: "WebDriver") -> bool:
        try:
            for element in b.find_elements(By.CSS_SELECTOR, f"table#jobs tr.job {css}"):
                if element.find_element(By.XPATH, "ancestor::tr[1]").get_attribute("data-job") == job:
                    if note is not None:
                        field = element.find_element(By.XPATH, "ancestor-or-self::form[1]//input[@name='note']")
                        field.clear()
                        field.send_keys(note)
                    element.click()
                    return True
        except StaleElementReferenceException:
            pass
        return False

    until(browser, clicked, f"{css} in the row of {job!r}")


def press(browser: "WebDriver", job: str, action: str, note: Optional[str] = None) -> None:
    """Submit the ``action`` form (pause, resume, trigger) of ``job``'s row, typing ``note`` first."""
    click_in_row(browser, job, f"form.action.{action} button[type=submit]", note)


def flashed(browser: "WebDriver", words: str) -> bool:
    """Whether a ``.flash`` message that contains ``words`` is on the page."""
    return any(words in text for text in browser.execute_script(FLASH_JS))


def test_jobs_page_shows_new_runs_live(site: Site, browser: "WebDriver") -> None:
    """The jobs page shows a run that ends after it was loaded, without being reloaded."""
    browser.get(site.base + "/")
    assert int(browser.find_element("tag name", "body").get_attribute("data-refresh-ms")) > 0
    first = until(browser, lambda b: (row(b, "tick") or {}).get("marks"), "a mark of 'tick'")
    newest = max(mark["slot"] for mark in first)
    browser.execute_script("window.leasecronTestMarker = 'not reloaded';")

    def new_success(b: "WebDriver") -> Optional[int]:
        marks = (row(b, "tick") or {}).get("marks", [])
        return next((m["slot"] for m in marks if m["slot"] > newest and "mark-success" in m["cls"].split()), None)

    slot = until(browser, new_success, f"a new success mark of 'tick' (after slot {newest})")
    assert browser.execute_script("return window.leasecronTestMarker") == "not reloaded"
    stored = site.store.get_run("tick", slot)
    assert stored is not None and stored.status == "success"


def test_pause_with_a_note_then_resume(site: Site, browser: "WebDriver") -> None:
    """Pausing through the form records the note and who paused; the instances then skip the job
    (no run of it starts while paused, while other jobs go on); resuming lets it run again."""
    job, note = "pausable", 'disk swap <b>tonight</b> & "tomorrow"'
    browser.get(site.base + "/")
    until(browser, lambda b: row(b, job), f"the row of {job!r}")
    press(browser, job, "pause", note)
    shown = until(browser, lambda b: flashed(b, job) and (row(b, job) or {}).get("paused") and row(b, job),
                  f"{job!r} paused, and a flash message about it")  # fmt: skip
    assert shown["note"] == note  # escaped: the markup of the note is shown as text
    assert BY in shown["pause"]
    state = site.store.job_state(job)
    assert state.paused and state.note == note and state.paused_by == BY and state.paused_ms is not None

    # The instances claim its slots and are told it is paused (each logs the skip) ...
    skip = re.compile(rf"skipped job '{job}' slot \S+ runner '[^']+' \(paused\)")
    wait_for(lambda: any(skip.search(p.stderr()) for p in list(site.instances.values())),
             timeout=8, message=f"no instance logged a skip of {job!r}, paused")  # fmt: skip
    # ... and go on with the other jobs: two slots of 'tick' start after the pause, none of the job.
    wait_for(lambda: len([r for r in site.runs("tick", 10) if r.started_ms > state.paused_ms]) >= 2,
             timeout=8, message="'tick' did not run twice after the pause")  # fmt: skip
    started = [r.slot_ms for r in site.runs(job) if r.started_ms > state.paused_ms]
    assert started == [], f"runs of the paused job started after the pause: {started}"
    marks = until(browser, lambda b: row(b, job), f"the row of {job!r}")["marks"]
    assert all(m["slot"] <= state.paused_ms for m in marks)

    press(browser, job, "resume")
    until(browser, lambda b: (row(b, job) or {"paused": True})["paused"] is False, f"{job!r} resumed")
    assert not site.store.job_state(job).paused
    resumed_ms = site.store.now_ms()
    run = wait_for(lambda: next((r for r in site.runs(job, 5) if r.slot_ms > resumed_ms), None), timeout=8,
                   message=f"{job!r} did not run again after it was resumed")  # fmt: skip
    until(browser, lambda b: any(m["slot"] == run.slot_ms for m in (row(b, job) or {}).get("marks", [])),
          f"the mark of {job!r} slot {run.slot_ms} after the resume")  # fmt: skip


def test_trigger_runs_the_job_once_and_its_page_shows_the_attempt(site: Site, browser: "WebDriver") -> None:
    """The trigger button makes one instance run the job now; its page shows the run and its attempt."""
    job = "exports/nightly"
    before = {r.slot_ms for r in site.runs(job)}
    browser.get(site.base + "/")
    until(browser, lambda b: row(b, job), f"the row of {job!r}")
    press(browser, job, "trigger")
    until(browser, lambda b: flashed(b, job), f"a flash message about {job!r}")
    run = wait_for(lambda: next((r for r in site.runs(job) if r.slot_ms not in before and r.finished_ms), None),
                   timeout=10, message=f"the triggered run of {job!r} did not end")  # fmt: skip
    assert run.status == "success" and run.reason == "manual"
    assert len([r for r in site.runs(job) if r.slot_ms not in before]) == 1

    from selenium.webdriver.common.by import By

    click_in_row(browser, job, "td.name a")
    until(browser, lambda b: b.find_element(By.CSS_SELECTOR, "h1.job-name").text == job, f"the page of {job!r}")
    assert browser.current_url == site.base + job_path(job)

    def section(b: "WebDriver") -> Optional[Dict[str, Any]]:
        return next((s for s in b.execute_script(RUNS_JS) if s["slot"] == run.slot_ms and s["attempts"]), None)

    shown = until(browser, section, f"the run of slot {run.slot_ms}")
    assert shown["status"] == "success"
    assert [(a["number"], a["runner"]) for a in shown["attempts"]] == [(1, run.runner)]
    assert "attempt-success" in shown["attempts"][0]["cls"].split()


def test_a_request_that_expired_unclaimed_shows_until_the_next_run(site: Site, browser: "WebDriver") -> None:
    """A request for a job that no instance registers expires unclaimed (``max_late_ms`` 0: 10 s
    after it was made): the jobs page then shows who asked and when it expired, live (not
    reloaded), and so does the job's page; the job's next run (claimed by another process, here
    the test's store handle) takes it off the jobs page, live."""
    from selenium.webdriver.common.by import By

    job, by = "orphan", "alice@ops-laptop"
    made = site.store.request_run(job, by=by, max_late_ms=0)
    browser.get(site.base + "/")
    until(browser, lambda b: row(b, job), f"the row of {job!r}")
    browser.execute_script("window.leasecronTestMarker = 'not reloaded';")
    shown = until(browser, lambda b: (row(b, job) or {}).get("expired"), f"the expired request of {job!r}",
                  timeout=LATE_TOLERANCE_MS / 1000 + PAGE_TIMEOUT)  # fmt: skip
    assert shown["text"].startswith(f"request by {by} expired unclaimed ")
    assert (shown["slot"], shown["ms"]) == (made.slot_ms, made.expires_ms)
    assert [r.state for r in site.store.job_state(job).requests] == ["expired"]
    assert browser.execute_script("return window.leasecronTestMarker") == "not reloaded"

    browser.get(site.base + job_path(job))
    about = until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "p.expired-request"), "the expired request")
    assert f"no instance claimed it in time: request by {by} expired unclaimed" in about[0].text

    browser.get(site.base + "/")
    until(browser, lambda b: (row(b, job) or {}).get("expired"), f"the expired request of {job!r}")
    browser.execute_script("window.leasecronTestMarker = 'not reloaded';")
    claimed = site.store.claim(job, site.store.now_ms(), runner="elsewhere", lease_ms=60_000).run
    assert claimed is not None and site.store.finish(job, claimed.slot_ms, claimed.token, "success")
    gone = until(browser, lambda b: (r := row(b, job)) and r["expired"] is None and r["marks"] and r,
                 f"{job!r} with its next run and no expired request")  # fmt: skip
    assert [mark["slot"] for mark in gone["marks"]] == [claimed.slot_ms]
    assert browser.execute_script("return window.leasecronTestMarker") == "not reloaded"


def test_killed_runner_draws_expired_then_success(site: Site, browser: "WebDriver") -> None:
    """SIGKILL the runner of a run of 'long' mid-run: a backup takes it over once the lease ran out,
    and the job's page draws the chain of attempts, expired then success."""
    job = "long"

    def fresh_run() -> Optional[Any]:
        now = site.store.now_ms()  # a run with most of its 1.2 s of work ahead: the kill lands mid-run
        return next((r for r in site.runs(job, 3) if r.status == "running" and now - r.started_ms < 500), None)

    run = wait_for(fresh_run, timeout=8, message=f"no run of {job!r} started")
    site.kill(run.runner)
    ended = wait_for(lambda: (lambda r: r if r and r.finished_ms else None)(site.store.get_run(job, run.slot_ms)),
                     timeout=10, message=f"the run of slot {run.slot_ms} was not taken over and ended")  # fmt: skip
    site.start_instance()  # three instances again, for the tests that follow
    assert ended.status == "success"
    assert [a.outcome for a in ended.attempts] == ["expired", "success"]

    browser.get(site.base + job_path(job))

    def chain(b: "WebDriver") -> Optional[List[Tuple[str, int, str]]]:
        for section in b.execute_script(RUNS_JS):
            if section["slot"] == run.slot_ms and len(section["attempts"]) == 2:
                return [(next(c for c in a["cls"].split() if c.startswith("attempt-")), a["number"], a["runner"])
                        for a in section["attempts"]]  # fmt: skip
        return None

    drawn = until(browser, chain, f"the two attempts of slot {run.slot_ms}")
    takeover = ended.attempts[1].runner
    assert drawn == [("attempt-expired", 1, run.runner), ("attempt-success", 2, takeover)]
    assert takeover != run.runner


class Times(HTMLParser):
    """The ``<time data-ms>`` elements of an HTML page as the server wrote it: attributes and text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.times: List[Dict[str, Any]] = []
        self._open: Optional[Dict[str, Any]] = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        values = dict(attrs)
        if tag == "time" and values.get("data-ms"):
            self._open = {"title": values.get("title"), "datetime": values.get("datetime"),
                          "ms": int(values["data-ms"] or 0), "text": ""}  # fmt: skip
            self.times.append(self._open)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "time" and self._open is not None:
            self._open["text"] = self._open["text"].strip()
            self._open = None


def utc_texts(ms: int) -> Tuple[str, str]:
    """The title and ``datetime`` of a time in UTC: ``2026-12-02 10:00:00 UTC`` and
    ``2026-12-02T10:00:00Z``, with ``.123`` before the zone when the time has milliseconds."""
    moment = datetime.fromtimestamp(ms // 1000, timezone.utc)
    millis = f".{ms % 1000:03d}" if ms % 1000 else ""
    return (moment.strftime("%Y-%m-%d %H:%M:%S") + millis + " UTC", moment.strftime("%Y-%m-%dT%H:%M:%S") + millis + "Z")


def test_times_are_shown_in_the_viewers_zone(site: Site, browser: "WebDriver") -> None:
    """The server writes every time in UTC; in the browser each reads in the viewer's zone, UTC on hover."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    served = Times(opener.open(site.base + "/", timeout=5).read().decode())
    assert served.times, "the jobs page shows no <time data-ms>"
    for time in served.times:  # without JavaScript: UTC, as text and as title
        assert (time["title"], time["datetime"]) == utc_texts(time["ms"])
        assert time["text"] == time["title"]

    browser.get(site.base + "/")
    zone = ZoneInfo(BROWSER_TZ)

    def rewritten(b: "WebDriver") -> Optional[List[Dict[str, Any]]]:
        times = b.execute_script(TIMES_JS)
        return times if times and all(t["text"] != t["title"] for t in times) else None

    for shown in until(browser, rewritten, "every <time> rewritten in the viewer's zone"):
        assert (shown["title"], shown["datetime"]) == utc_texts(shown["ms"])
        local = datetime.fromtimestamp(shown["ms"] // 1000, zone)  # 24-hour, as dashboard.js writes it
        assert local.strftime("%H:%M:%S") in shown["text"], (shown, local)


# -- screenshots -------------------------------------------------------------------------------

DOCS_STATIC = ROOT / "docs" / "_static"
DASHBOARD = ROOT / "leasecron" / "contrib" / "dashboard"
#: Beside the PNGs: the hashes of the files the pages are drawn from, when they were made.
SOURCES_FILE = DOCS_STATIC / "dashboard-screenshots.sha256"
UPDATE = os.environ.get("LEASECRON_UPDATE_SCREENSHOTS") == "1"
HOW = "LEASECRON_UPDATE_SCREENSHOTS=1 .venv/bin/python -m pytest tests/browser -k screenshots"


def drawn_from() -> str:
    """What the screenshots depend on, as text: the sha256 of every template and static file of the
    dashboard (sorted by path) and the window size."""
    files = sorted(p for d in ("templates", "static") for p in (DASHBOARD / d).rglob("*") if p.is_file())
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(ROOT).as_posix()}" for p in files]
    return "\n".join([f"# the sources of docs/_static/dashboard-*.png; remake them with: {HOW}", *lines,
                      f"window {WINDOW[0]}x{WINDOW[1]}", ""])  # fmt: skip


def png_size(data: bytes) -> Tuple[int, int]:
    """Width and height of a PNG (its IHDR chunk); fails on anything else."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def pages(site: Site) -> Sequence[Tuple[str, str, Tuple[str, ...]]]:
    """The four pages to show: (name, path, the CSS selectors of what the page must show first)."""
    failed = wait_for(lambda: next((r for r in site.runs("flaky", 10) if r.status == "failed"), None),
                      timeout=10, message="no failed run of 'flaky'")  # fmt: skip
    return (
        ("jobs", "/", ("tr.job td.marks a.mark", "tr.job.paused td.pause .note", "tr.job td.live span.live-run")),
        ("job", job_path("long"), ("section.run ol.timeline li.attempt",)),
        ("run", f"{job_path('flaky')}/runs/{failed.slot_ms}", ("table.attempts tr.attempt", "pre.error")),
        ("instances", "/instances", ("tr.instance td.registers li.job", "tr.instance td.registers li.task")),
    )


def test_screenshots_are_current(site: Site, browser: "WebDriver", tmp_path: Path) -> None:
    """The docs' screenshots of the four pages exist and were made from the current templates.

    Pixels change with every run (times, marks), so they are not compared. Instead: each page is
    drawn and shot here (into ``tmp_path``); ``LEASECRON_UPDATE_SCREENSHOTS=1`` copies the shots
    into ``docs/_static`` and writes :data:`SOURCES_FILE`, the sha256 of every template and
    static file of the dashboard; otherwise the test checks that each PNG in the docs is a PNG of
    the size this browser draws, and that :data:`SOURCES_FILE` still matches the sources: a
    change to a template, the CSS or the script fails it until the screenshots are made again.
    """
    from selenium.webdriver.common.by import By

    def shows(selectors: Tuple[str, ...]) -> Callable[["WebDriver"], bool]:
        return lambda b: all(b.find_elements(By.CSS_SELECTOR, css) for css in selectors)

    paused = "exports/nightly"  # the jobs page shows a paused job too
    site.store.pause(paused, by="alice@ops-laptop", note="until the new bucket is ready")
    try:
        for name, path, ready in pages(site):
            browser.get(site.base + path)
            until(browser, shows(ready), f"the {name} page with {', '.join(ready)}")
            shot = tmp_path / f"dashboard-{name}.png"
            assert browser.save_screenshot(str(shot))
            target = DOCS_STATIC / shot.name
            if UPDATE:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(shot.read_bytes())
                continue
            assert target.is_file(), f"{target} is missing: make it with {HOW}"
            assert png_size(target.read_bytes()) == png_size(shot.read_bytes()), f"{target}: remake it with {HOW}"
    finally:
        site.store.resume(paused, by="alice@ops-laptop")
    if UPDATE:
        SOURCES_FILE.write_text(drawn_from())
    assert SOURCES_FILE.is_file() and SOURCES_FILE.read_text() == drawn_from(), (
        f"the dashboard's templates or static files changed since the screenshots were made: {HOW}"
    )
