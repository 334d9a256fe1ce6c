"""Schedules as data on the ``leasecron`` command line, run as real processes on a SQLite file (and
once on Redis): ``reschedule``, ``put``, ``delete``, what ``jobs`` shows of them with and without
``--app``, a started instance applying what they stored, and bad input (exit 2, nothing stored)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

import leasecron
from leasecron import Context, LeaseCron, Store
from leasecron.cli import commands, main
from leasecron.formatting import utc_text
from leasecron.schedules import make_schedule

from .cli_support import parse_table
from .conftest import BACKENDS
from .helpers import wait_for

pytestmark = pytest.mark.processes


def cli(*args: str, cwd: "Path | None" = None) -> subprocess.CompletedProcess:
    """Run ``python -m leasecron ARGS`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "leasecron", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)  # fmt: skip


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Tuple[Store, str]]:
    """A SQLite file store (created) and its URL, which every process opens."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = leasecron.open_store(url)
    store.jobs()  # creates it
    yield store, url
    store.close()


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> Tuple[int, str, str]:
    """``leasecron ARGS`` run by :func:`leasecron.cli.main` here: (exit code, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- reschedule, put, delete and jobs -------------------------------------------------------------


def test_put_reschedule_jobs_and_delete(sqlite: Tuple[Store, str]) -> None:
    """`put` stores a job (task, kwargs, options, tz) and prints it; `reschedule` overrides a code
    job's schedule; `jobs URL` (no --app) shows both with their next slot on the store's clock and
    the stored schedules below (source, schedule, tz, version, task and kwargs), `--json` too;
    `reschedule --reset` and `delete` raise the version and leave nothing shown."""
    store, url = sqlite
    put = cli("put", url, "report-team-3", "--task", "send_report", "--schedule", "0 9 * * 1-5", "--tz",
              "Europe/Berlin", "--kwargs", '{"team": 3}', "--option", "timeout_ms=60000", "--option",
              "overlap=allow", "--by", "alice@ops")  # fmt: skip
    assert put.returncode == 0, put.stderr
    assert put.stdout.startswith("Stored job 'report-team-3': task send_report, kwargs {\"team\": 3}, schedule"
                                 " 0 9 * * 1-5, tz Europe/Berlin, options {\"overlap\": \"allow\", \"timeout_ms\":"
                                 " 60000}; version 1, by alice@ops, ")  # fmt: skip
    record = store.stored_schedule("report-team-3")
    assert record is not None
    assert (record.source, record.task, dict(record.kwargs), dict(record.options), record.updated_by) == (
        "stored", "send_report", {"team": 3}, {"timeout_ms": 60000, "overlap": "allow"}, "alice@ops")  # fmt: skip

    moved = cli("reschedule", url, "report", "*/10 * * * *", "--tz", "Europe/Berlin", "--by", "bob@ops")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.startswith("Rescheduled job 'report': */10 * * * *, tz Europe/Berlin; version 1, by bob@ops")
    assert "job 'report' has no stored runs" in moved.stderr  # a name that may be mistyped: a warning
    tick = cli("reschedule", url, "tick", "90", "--json")
    assert tick.returncode == 0, tick.stderr
    data = json.loads(tick.stdout)
    assert (data["source"], data["schedule"], data["tz"], data["version"]) == ("override", "90", None, 1)

    jobs = cli("jobs", url)
    assert jobs.returncode == 0, jobs.stderr
    now = store.now_ms()
    rows = {row["job"]: row for row in parse_table(jobs.stdout)}
    assert list(rows) == ["report", "report-team-3", "tick"]
    for name, spec, tz in (("report", "*/10 * * * *", "Europe/Berlin"), ("report-team-3", "0 9 * * 1-5",
                                                                         "Europe/Berlin"), ("tick", 90, "UTC")):
        assert rows[name]["next slot (UTC)"] in {utc_text(make_schedule(spec, tz).next_after(now - ms))
                                                 for ms in (0, 5000)}, rows[name]  # fmt: skip
    assert (rows["report"]["schedule"], rows["tick"]["schedule"]) == ("*/10 * * * * (Europe/Berlin)", "every 1m 30s")
    stored = jobs.stdout.split("Stored schedules (")[1].splitlines()[1:4]
    assert stored[0].startswith("  report         source override, schedule */10 * * * *, tz Europe/Berlin,"
                                " version 1; by bob@ops, ")  # fmt: skip
    assert stored[1].startswith('  report-team-3  source stored, task send_report, kwargs {"team": 3}, schedule'
                                ' 0 9 * * 1-5, tz Europe/Berlin, version 1, options {"overlap": "allow",'
                                ' "timeout_ms": 60000}; by alice@ops, ')  # fmt: skip
    assert stored[2].startswith("  tick           source override, schedule 90, tz the job's, version 1; by ")
    listed = {j["job"]: j for j in json.loads(cli("jobs", url, "--json").stdout)}
    assert [(j["source"], j["schedule"], j["tz"], j["version"]) for j in listed.values()] == [
        ("override", "*/10 * * * * (Europe/Berlin)", "Europe/Berlin", 1),
        ("stored", "0 9 * * 1-5 (Europe/Berlin)", "Europe/Berlin", 1), ("override", "every 1m 30s", None, 1)]
    assert listed["report-team-3"]["stored_schedule"] == record.to_dict()

    reset = cli("reschedule", url, "report", "--reset", "--by", "bob@ops")
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.startswith("Reset job 'report' to its code's schedule (it was */10 * * * *, tz Europe/Berlin);"
                                   " version 2, by bob@ops")  # fmt: skip
    again = cli("reschedule", url, "report", "--reset")
    assert again.stdout.strip() == ("Job 'report' has no stored schedule: it runs on its code's schedule; nothing"
                                    " changed.")  # fmt: skip
    deleted = cli("delete", url, "report-team-3", "--json", "--by", "alice@ops")
    assert deleted.returncode == 0, deleted.stderr
    assert {k: json.loads(deleted.stdout)[k] for k in ("source", "version", "task", "updated_by")} == {
        "source": "code", "version": 2, "task": None, "updated_by": "alice@ops"}  # fmt: skip
    after = cli("jobs", url)
    assert [row["job"] for row in parse_table(after.stdout)] == ["tick"] and "report-team-3" not in after.stdout
    assert [(r.job, r.source, r.version) for r in store.schedule_changes(0).changes] == [
        ("tick", "override", 1), ("report", "code", 2), ("report-team-3", "code", 2)]


def test_redis_put_and_jobs(tmp_path: Path) -> None:
    """On Redis: `put` (an interval, no tz) and `jobs --json` on the store's URL from other processes."""
    backend = BACKENDS["redis"](tmp_path)
    try:
        store, url = backend.open(), backend.url()
        put = cli("put", url, "sync-7", "--task", "sync", "--schedule", "30", "--kwargs", '{"account": 7}', "--json")
        assert put.returncode == 0, put.stderr
        job = json.loads(put.stdout)
        assert (job["name"], job["task"], job["schedule"], job["tz"], job["kwargs"], job["version"]) == (
            "sync-7", "sync", "30", None, {"account": 7}, 1)  # fmt: skip
        [listed] = json.loads(cli("jobs", url, "--json").stdout)
        assert (listed["job"], listed["source"], listed["schedule"], listed["version"]) == (
            "sync-7", "stored", "every 30.0 s", 1)  # fmt: skip
        assert listed["next_slot_ms"] % 30_000 == 0 and 0 < listed["next_slot_ms"] - store.now_ms() <= 30_000
    finally:
        backend.close()


# -- an instance applies it ----------------------------------------------------------------------


def test_a_started_instance_runs_what_the_cli_stored(sqlite: Tuple[Store, str]) -> None:
    """An instance with a yearly code job and a task: `reschedule` the job to every second and `put`
    a stored job of the task every second; both run on the instance within its poll, the stored one
    with its kwargs; after `delete` and `--reset`, neither starts a new run."""
    store, url = sqlite
    seen: List[Tuple[str, object]] = []
    lock = threading.Lock()
    cron = LeaseCron(url, runner="web-1", poll_ms=100, jitter_ms=0, catch_up_ms=0)

    @cron.job("0 0 1 1 *", name="report")
    def report(ctx: Context) -> None:
        with lock:
            seen.append(("report", ctx.slot_ms))

    @cron.task("greet")
    def greet(ctx: Context, who: str) -> None:
        with lock:
            seen.append(("greet", who))

    cron.start()
    try:
        assert cli("reschedule", url, "report", "1").returncode == 0
        assert cli("put", url, "greet-ann", "--task", "greet", "--schedule", "1", "--kwargs", '{"who": "ann"}',
                   "--option", "overlap=allow").returncode == 0  # fmt: skip
        wait_for(lambda: {"report", "greet"} <= {name for name, _ in seen}, 10, message=f"not both ran: {seen}")
        assert ("greet", "ann") in seen
        assert cli("delete", url, "greet-ann").returncode == 0
        assert cli("reschedule", url, "report", "--reset").returncode == 0
        wait_for(lambda: cron.store.stored_schedule("report").source == "code", 5)  # type: ignore[union-attr]
        threading.Event().wait(0.3)  # the instance's poll applies both
        with lock:
            before = len(seen)
        threading.Event().wait(1.2)  # a second slot of the replaced schedules passes: nothing starts
        with lock:
            assert len(seen) == before, seen[before:]
    finally:
        cron.stop(timeout=5)
        cron.store.close()


# -- jobs with --app ------------------------------------------------------------------------------


APP = '''
import leasecron

cron = leasecron.LeaseCron({url!r}, tz="Asia/Tokyo")


@cron.job("0 0 1 1 *", name="report", tz="Europe/Paris")
def report() -> None:
    pass


@cron.task("send_report")
def send_report(team: int) -> None:
    pass
'''


def test_jobs_with_app_shows_the_override_in_the_jobs_zone(sqlite: Tuple[Store, str], tmp_path: Path) -> None:
    """`jobs --app`: a code job overridden without a tz shows the override in the job's zone; a stored
    job without a tz is read in the app's tz; without --app, neither zone is known ('-')."""
    store, url = sqlite
    store.set_schedule("report", by="ops", schedule="30 6 * * *")
    store.set_schedule("team-1", by="ops", schedule="0 9 * * *", task="send_report", kwargs={"team": 1})
    (tmp_path / "schedapp.py").write_text(textwrap.dedent(APP.format(url=url)))
    result = cli("jobs", "--app", "schedapp:cron", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {row["job"]: row for row in parse_table(result.stdout)}
    now = store.now_ms()
    assert rows["report"]["schedule"] == "30 6 * * * (Europe/Paris)"
    assert rows["report"]["next slot (UTC)"] == utc_text(make_schedule("30 6 * * *", "Europe/Paris").next_after(now))
    assert rows["team-1"]["schedule"] == "0 9 * * * (Asia/Tokyo)"
    assert "tz the job's" in result.stdout and "tz the instances'" in result.stdout
    plain = {row["job"]: row for row in parse_table("\n".join(commands.jobs_output(store, None, False)))}
    assert [(plain[n]["schedule"], plain[n]["next slot (UTC)"]) for n in ("report", "team-1")] == [
        ("30 6 * * * (the job's)", "-"), ("0 9 * * * (the instances')", "-")]


# -- bad input ------------------------------------------------------------------------------------


def test_bad_input_exits_2_with_one_line_and_stores_nothing(
    sqlite: Tuple[Store, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad schedule, zone, --kwargs, --option, a missing or extra EXPR, and a name of the wrong
    kind: exit 2 and one line naming what is wrong; the store holds only what the test stored."""
    store, url = sqlite
    store.set_schedule("overridden", by="ops", schedule="0 3 * * *")
    store.set_schedule("stored", by="ops", schedule="60", task="t")
    put = ["put", url, "j", "--task", "t", "--schedule"]
    cases = {
        ("reschedule", url, "j", "61 * * * *"): "'j': schedule: not a valid cron expression '61 * * * *'",
        ("reschedule", url, "j", "0 3 * * *", "--tz", "Mars/Base"): "Mars/Base",
        ("reschedule", url, "j", "0"): "schedule interval must be a positive number of seconds",
        ("reschedule", url, "j"): "give EXPR (a cron string, or an interval in seconds) or --reset",
        ("reschedule", url, "j", "5", "--reset"): "give EXPR",
        ("reschedule", url, "j", "--reset", "--tz", "UTC"): "a reset (--reset) takes no --tz",
        ("reschedule", url, "stored", "5"): "'stored' is a stored job (task 't'): change it with `leasecron put`",
        ("reschedule", url, "j", "5", "--by", ""): "by (who acts) must be a non-empty string",
        (*put, "60", "--kwargs", "{team: 3}"): "--kwargs must be a JSON object",
        (*put, "60", "--kwargs", "[3]"): "--kwargs must be a JSON object, such as '{\"team\": 3}', not '[3]'",
        (*put, "60", "--option", "lease_ms"): "--option must be NAME=VALUE (such as lease_ms=60000), not 'lease_ms'",
        (*put, "60", "--option", "leese_ms=5"): "unknown job option 'leese_ms'",
        (*put, "60", "--option", "overlap=sometimes"): "overlap",
        (*put, "60", "--option", "lease_ms=1000", "--option", "heartbeat_ms=600"): "heartbeat_ms (600) must be under",
        (*put, "60", "--option", "tz=UTC"): "give tz as its own field",
        (*put, "* * *"): "'j': schedule: not a valid cron expression",
        ("put", url, "overridden", "--task", "t", "--schedule", "60"): "'overridden' holds an override of a code job",
        ("delete", url, "nothing"): "the store holds no stored job 'nothing'",
        ("delete", url, "overridden"): "`leasecron reschedule URL JOB --reset` resets it",
    }
    for args, message in cases.items():
        code, out, err = in_process(capsys, *args)
        assert code == 2, (args, out, err)
        [line] = err.strip().splitlines()
        assert line.startswith(f"leasecron {args[0]}: error: ") and message in line, (args, line)
    assert [(r.job, r.version) for r in store.schedule_changes(0).changes] == [("overridden", 1), ("stored", 1)]
    real = cli("delete", url, "nothing")  # the same, from the command itself
    assert (real.returncode, real.stderr.strip()) == (2, "leasecron delete: error: the store holds no stored job"
                                                         " 'nothing'")  # fmt: skip


def test_the_commands_never_create_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`reschedule`, `put` and `delete` on a SQLite file that does not exist: exit 1 naming it; no file."""
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for args in (["reschedule", url, "j", "60"], ["put", url, "j", "--task", "t", "--schedule", "60"],
                 ["delete", url, "j"]):  # fmt: skip
        code, _, err = in_process(capsys, *args)
        assert code == 1, (args, err)
        assert re.search(rf"^leasecron {args[0]}: error: .*typo.db' does not exist: `leasecron {args[0]}` creates no"
                         " store", err), err  # fmt: skip
    assert list(tmp_path.iterdir()) == []
