"""Instances in the store on the ``leasecron`` command line: ``instances`` lists the live instances
and what each registers, ``jobs`` shows the code's schedules from their announcements (without
``--app``) and flags instances that disagree, and ``trigger`` warns when no live instance
registers the job. The instances are started here; the commands run as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

import leasecron
from leasecron import LeaseCron, Store
from leasecron.formatting import utc_text
from leasecron.schedules import make_schedule

from .cli_support import parse_table
from .helpers import wait_for

pytestmark = pytest.mark.processes

#: The instances' poll, in ms: the first poll announces them.
POLL_MS = 100


def cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``python -m leasecron ARGS`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "leasecron", *args], capture_output=True, text=True, timeout=60)


def noop(**kwargs: Any) -> None:
    """A handler that does nothing."""


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Tuple[Store, str]]:
    """A SQLite file store (created) and its URL, which every process opens."""
    url = f"sqlite:///{tmp_path / 'i.db'}"
    store = leasecron.open_store(url)
    store.jobs()  # creates it
    yield store, url
    store.close()


@pytest.fixture
def started() -> Iterator[List[LeaseCron]]:
    """The instances a test starts, stopped at its end."""
    crons: List[LeaseCron] = []
    yield crons
    for cron in crons:
        cron.stop(timeout=2)


def start(crons: List[LeaseCron], url: str, runner: str, report: str = "0 9 * * 1-5") -> LeaseCron:
    """An instance ``runner`` with the code job ``report`` on ``report`` (Berlin), ``tick`` every
    hour and the task ``send``, started and announced."""
    cron = LeaseCron(url, runner=runner, poll_ms=POLL_MS, catch_up_ms=0)
    cron.add_job(noop, report, name="report", tz="Europe/Berlin")
    cron.add_job(noop, 3600, name="tick")
    cron.task("send")(noop)
    cron.start()
    crons.append(cron)
    wait_for(lambda: runner in [i.runner for i in cron.store.instances()], 10)
    return cron


def test_instances_lists_each_live_instance_and_what_it_registers(
    sqlite: Tuple[Store, str], started: List[LeaseCron]
) -> None:
    store, url = sqlite
    empty = cli("instances", url)
    assert empty.returncode == 0 and empty.stdout.startswith("No live instance in "), empty
    start(started, url, "web-1")
    start(started, url, "web-2")
    shown = cli("instances", url)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.split("\n\n")[0]
    rows = {row["runner"]: row for row in parse_table(table)}
    assert sorted(rows) == ["web-1", "web-2"]
    assert {(row["pid"], row["version"], row["jobs"], row["tasks"]) for row in rows.values()} == {
        (str(os.getpid()), leasecron.__version__, "2", "1")
    }
    assert "web-1 registers 2 job(s) in code and 1 task(s):" in shown.stdout
    assert "  job   report  0 9 * * 1-5 (Europe/Berlin)" in shown.stdout
    assert "  task  send" in shown.stdout
    listed = json.loads(cli("instances", url, "--json").stdout)
    assert [i["runner"] for i in listed] == ["web-1", "web-2"]  # oldest start first
    assert listed[0]["jobs"][0] == {"name": "report", "schedule": "0 9 * * 1-5", "tz": "Europe/Berlin"}
    assert listed[0]["tasks"] == ["send"] and listed[0]["started_ms"] <= listed[0]["seen_ms"]
    started.pop(0).stop(timeout=2)  # a stopped instance is removed at once
    assert [i["runner"] for i in json.loads(cli("instances", url, "--json").stdout)] == ["web-2"]


def test_jobs_shows_the_code_schedules_the_instances_announce_and_flags_a_disagreement(
    sqlite: Tuple[Store, str], started: List[LeaseCron]
) -> None:
    store, url = sqlite
    start(started, url, "web-1")
    now = store.now_ms()
    rows = {row["job"]: row for row in parse_table(cli("jobs", url).stdout.split("\n\n")[0])}
    assert (rows["tick"]["schedule"], rows["tick"]["next slot (UTC)"]) == (
        "every 1h 00m",
        utc_text(now // 3_600_000 * 3_600_000 + 3_600_000),
    )
    berlin = make_schedule("0 9 * * 1-5", "Europe/Berlin").next_after(now)
    assert (rows["report"]["schedule"], rows["report"]["next slot (UTC)"]) == (
        "0 9 * * 1-5 (Europe/Berlin)",
        utc_text(berlin),
    )
    start(started, url, "web-2", report="30 9 * * 1-5")  # a rolling deploy: web-2 runs a new schedule
    start(started, url, "web-3")
    shown = cli("jobs", url).stdout
    rows = {row["job"]: row for row in parse_table(shown.split("\n\n")[0])}
    assert rows["report"]["schedule"] == "0 9 * * 1-5 (Europe/Berlin) (!)"  # the most instances' first
    assert rows["tick"]["schedule"] == "every 1h 00m"
    assert "  report: 0 9 * * 1-5 (Europe/Berlin) on web-1, web-3" in shown
    assert "  report: 30 9 * * 1-5 (Europe/Berlin) on web-2" in shown
    listed = {job["job"]: job for job in json.loads(cli("jobs", url, "--json").stdout)}
    report = listed["report"]
    assert (report["source"], report["tz"], report["registered"]) == ("code", "Europe/Berlin", False)
    assert report["in_use"] == [
        {"schedule": "0 9 * * 1-5", "tz": "Europe/Berlin", "runners": ["web-1", "web-3"]},
        {"schedule": "30 9 * * 1-5", "tz": "Europe/Berlin", "runners": ["web-2"]},
    ]
    assert listed["tick"]["in_use"] == [{"schedule": "3600", "tz": "UTC", "runners": ["web-1", "web-2", "web-3"]}]


def test_trigger_warns_at_once_when_no_live_instance_registers_the_job(
    sqlite: Tuple[Store, str], started: List[LeaseCron]
) -> None:
    """The request is made all the same (an instance may be starting); a job registered in code,
    or a stored job whose task an instance registers, draws no such warning."""
    store, url = sqlite
    alone = cli("trigger", url, "report")
    assert alone.returncode == 0, alone.stderr
    assert "warning: no live instance registers job 'report' (0 live in" in alone.stderr
    assert len(store.job_state("report").requests) == 1
    start(started, url, "web-1")
    registered = cli("trigger", url, "report")
    assert registered.returncode == 0 and "no live instance registers" not in registered.stderr
    store.set_schedule("team-3", by="ops", schedule="0 9 * * *", task="send")
    assert "no live instance registers" not in cli("trigger", url, "team-3").stderr
    store.set_schedule("team-4", by="ops", schedule="0 9 * * *", task="missing")
    lacking = cli("trigger", url, "team-4").stderr
    assert "warning: no live instance registers job 'team-4' or its task 'missing' (1 live in" in lacking
