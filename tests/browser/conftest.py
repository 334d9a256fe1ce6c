"""Fixtures of the browser tests: a cluster, the dashboard and a real Chromium, one per module.

Everything is real and shared by the module's tests (starting it takes a few seconds, each test
a few more): a SQLite store file; three instances, each ``leasecron run browser_app:cron`` of
the small app :data:`APP` (written into a temporary directory) as an OS process; the dashboard
as ``leasecron dashboard URL --port 0 --app browser_app:cron``, another process; and a headless
Chromium (Debian's ``chromium`` and its ``chromedriver``) under Selenium. The tests act on
different jobs of the app, so their order does not matter; the test that kills an instance
starts another in its place.

Nothing downloads a browser or a driver: both paths are given explicitly, so Selenium never
calls Selenium Manager, and ``SE_OFFLINE=true`` forbids it a download anyway. Without them the
tests skip with the reason, except in CI (``CI=true``), where ``.ci/run`` installs them and
their absence is a failure.

Chromium runs in the zone :data:`BROWSER_TZ` (env ``TZ`` of chromedriver, which Chromium
inherits): half an hour off any whole-hour zone, so a time shown in the viewer's zone can
never read like its UTC title.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, NoReturn, Optional

import pytest

import leasecron
from tests.ci import skip_or_fail
from tests.cli_support import Process, environment

if TYPE_CHECKING:  # selenium is imported when a test needs the browser (it may be missing)
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: The browser's zone: UTC+05:30 all year (no daylight saving time).
BROWSER_TZ = "Asia/Kolkata"
#: The browser window, fixed so that the screenshots keep their size.
WINDOW = (1440, 900)
#: How long a process gets to start (an instance logs "starting runner"; the dashboard answers).
START_TIMEOUT = 20.0

#: The app the instances run; the dashboard imports it too (--app) for schedules and next slots.
APP = '''
"""The browser tests' app (written by tests/browser/conftest.py): the jobs the instances run."""

import logging
import os
import time

import leasecron

cron = leasecron.LeaseCron(
    os.environ["LEASECRON_STORE"], os.environ.get("BROWSER_RUNNER"),
    lease_ms=600, heartbeat_ms=100, poll_ms=200, stop_timeout_ms=2_000,
)
#: Once a year, at New Year: the jobs on it run in the tests only when triggered.
YEARLY = "0 0 1 1 *"


def work(ctx, seconds):
    """Busy for ``seconds``, stopping early when the run is aborted."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.signal.raise_if_aborted()
        time.sleep(0.02)


@cron.job(1, name="tick")
def tick(ctx):
    """Every second, a short run."""
    work(ctx, 0.05)


@cron.job(1, name="pausable")
def pausable(ctx):
    """Every second, a short run: the pause test pauses and resumes it."""
    work(ctx, 0.05)


@cron.job(2, name="flaky")
def flaky(ctx):
    """Every 2 s; one slot in three fails, with an error of several lines."""
    work(ctx, 0.1)
    if ctx.slot_ms // 2_000 % 3 == 0:
        raise RuntimeError(f"upstream answered 503 for slot {ctx.slot_ms}\\nretry later <or not>")


@cron.job(3, name="long")
def long(ctx):
    """Every 3 s, 1.2 s of work: long enough to kill its runner mid-run."""
    work(ctx, 1.2)


@cron.job(YEARLY, name="exports/nightly")
def exports(ctx):
    """Runs when triggered (a "/" in the name: percent-encoded in the dashboard's paths)."""
    work(ctx, 0.1)


@cron.task("echo")
def echo(ctx, message):
    """The task of the stored jobs made in the dashboard's form: a short run that logs its kwargs."""
    work(ctx, 0.05)
    logging.getLogger("browser_app").warning("echo %r slot %d", message, ctx.slot_ms)
'''


def unavailable(reason: str) -> NoReturn:
    """Skip the test with ``reason``, or fail it in CI, where the browser must be there."""
    skip_or_fail(reason, " (CI installs chromium and chromium-driver in .ci/run)")


@pytest.fixture(scope="module")
def chromium_present() -> None:
    """Chromium, chromedriver and Selenium are installed (else skip, or fail in CI)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            unavailable(f"{path} is missing: apt-get install chromium chromium-driver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        unavailable("selenium is not installed: pip install -e '.[test]'")


class Site:
    """The instances and the dashboard of one module's tests, and a store handle on their file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        #: The processes' store URL: relative to their working directory, the temporary directory,
        #: so that the pages (and their screenshots) name ``leasecron.db``, not a temporary path.
        self.url = "sqlite:///leasecron.db"
        self.store = leasecron.open_store(f"sqlite:///{directory / 'leasecron.db'}")
        self.instances: Dict[str, Process] = {}
        self.dashboard: Optional[Process] = None
        self.base = ""
        self._numbers = itertools.count(1)
        (directory / "browser_app.py").write_text(APP)

    def _env(self, runner: Optional[str] = None) -> Dict[str, str]:
        env = environment(self.url)
        env.pop("BROWSER_RUNNER", None)
        if runner is not None:
            env["BROWSER_RUNNER"] = runner
        return env

    def start_instance(self) -> str:
        """Start one more instance (runner ``instance-N``); its runner name once it has started."""
        runner = f"instance-{next(self._numbers)}"
        process = Process(["-m", "leasecron", "run", "browser_app:cron"], cwd=self.directory, env=self._env(runner))
        self.instances[runner] = process
        process.wait_line(r"starting runner", timeout=START_TIMEOUT)
        return runner

    def kill(self, runner: str) -> None:
        """SIGKILL the instance ``runner`` (it leaves its live runs behind) and forget it."""
        self.instances.pop(runner).kill()

    def start_dashboard(self) -> None:
        """Start ``leasecron dashboard --port 0`` (a free loopback port, named in the line it prints
        once it listens); return once it answers ``/``."""
        args = ["-m", "leasecron", "dashboard", self.url, "--port", "0", "--app", "browser_app:cron"]
        self.dashboard = Process(args, cwd=self.directory, env=self._env())
        at = self.dashboard.wait_line(r"leasecron dashboard on http://127\.0\.0\.1:\d+/", timeout=START_TIMEOUT)
        line = self.dashboard.stderr().splitlines()[at]
        self.base = line[line.index("http://") :].split("/ ", 1)[0]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        deadline = time.monotonic() + START_TIMEOUT
        error: object = "no answer yet"
        while True:
            try:
                with opener.open(self.base + "/", timeout=2) as answer:
                    if answer.status == 200:
                        return
                    error = f"status {answer.status}"
            except (OSError, urllib.error.URLError) as exc:
                error = exc
            if self.dashboard.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the dashboard did not answer {self.base}/ ({error}):\n{self.dashboard.stderr()}")
            time.sleep(0.05)

    def runs(self, job: str, limit: int = 100) -> List[leasecron.Run]:
        """The stored runs of ``job``, newest first."""
        return self.store.runs(job, limit)

    def close(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after a deadline) and close the store handle."""
        processes = list(self.instances.values()) + ([self.dashboard] if self.dashboard else [])
        for process in processes:
            if process.proc.poll() is None:
                process.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in processes:
            try:
                process.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:
                pass
            process.kill()
        self.store.close()


@pytest.fixture(scope="module")
def site(chromium_present: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Three instances and the dashboard on one SQLite file, stopped after the module's tests."""
    site = Site(tmp_path_factory.mktemp("browser"))
    try:
        for _ in range(3):
            site.start_instance()
        site.start_dashboard()
        yield site
    finally:
        site.close()


@pytest.fixture(scope="module")
def browser(chromium_present: None) -> Iterator["WebDriver"]:
    """A headless Chromium in the zone :data:`BROWSER_TZ`, with a fixed window size."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-proxy-server",  # every page is on loopback
        "--lang=en-US",
        "--hide-scrollbars",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(argument)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")
        service = Service(str(CHROMEDRIVER), env=dict(os.environ, TZ=BROWSER_TZ))
        driver = webdriver.Chrome(service=service, options=options)
        try:
            driver.set_page_load_timeout(20)
            yield driver
        finally:
            driver.quit()
