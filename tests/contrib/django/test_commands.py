"""`python manage.py leasecron VERB`: the `leasecron` command's verbs and options on the project's
store and jobs (no URL, no --app), each run as a real process."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

from leasecron import open_store
from tests.cli_support import parse_table
from tests.helpers import wait_for

from .conftest import Project, ticks
from .test_runs import RUNNING


def as_json(project: Project, *args: str) -> Any:
    return json.loads(project.ok("leasecron", *args, "--json"))


def by_job(jobs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    return {job["job"]: job for job in jobs}


def test_the_verbs_on_a_running_project(project: Project, tmp_path: Path) -> None:
    """With `manage.py leasecron run` running the project's cron: jobs lists the project's job with
    its code schedule; instances the running one; trigger --wait runs it there, and runs and show
    find the run; pause and resume, reschedule and --reset, put (a stored job of the project's
    task, run with its kwargs through the ORM) and delete act on the project's store; check
    checks it; SIGTERM stops run with exit 0."""
    project.migrate()
    runner = project.start("leasecron", "run", "--log-level", "DEBUG")
    runner.wait_line(RUNNING)

    jobs = by_job(as_json(project, "jobs"))
    tick = jobs["shop.tick"]
    assert (tick["registered"], tick["schedule"], tick["source"], tick["options"]["lease_ms"]) == (
        True, "every 1h 00m", "code", 1000,
    )  # fmt: skip
    table = parse_table(project.ok("leasecron", "jobs"))
    assert [(row["job"], row["schedule"]) for row in table] == [("shop.tick", "every 1h 00m")]

    live = wait_for(lambda: as_json(project, "instances"), timeout=15)
    assert [[job["name"] for job in one["jobs"]] for one in live] == [["shop.tick"]]
    assert [one["tasks"] for one in live] == [["shop.greet"]]

    answer = as_json(project, "trigger", "shop.tick", "--wait", "--timeout", "20")
    assert answer["result"] == "success" and answer["run"]["reason"] == "manual"
    slot = answer["request"]["slot_ms"]
    assert slot in [row["slot_ms"] for row in ticks(tmp_path / "shop.sqlite3", "shop.tick")]
    runs = as_json(project, "runs", "--job", "shop.tick")
    assert (slot, "success", "manual") in [(run["slot_ms"], run["status"], run["reason"]) for run in runs]
    assert as_json(project, "show", "shop.tick", str(slot))["status"] == "success"
    assert f"slot_ms {slot}" in project.ok("leasecron", "show", "shop.tick", str(slot))

    paused = as_json(project, "pause", "shop.tick", "--note", "maintenance", "--by", "ops")
    assert (paused["paused"], paused["paused_by"], paused["note"]) == (True, "ops", "maintenance")
    assert as_json(project, "resume", "shop.tick")["paused"] is False

    record = as_json(project, "reschedule", "shop.tick", "*/5 * * * *", "--tz", "Europe/Paris")
    assert (record["source"], record["schedule"], record["tz"]) == ("override", "*/5 * * * *", "Europe/Paris")
    assert by_job(as_json(project, "jobs"))["shop.tick"]["schedule"] == "*/5 * * * * (Europe/Paris)"
    assert as_json(project, "reschedule", "shop.tick", "--reset")["source"] == "code"

    stored = as_json(project, "put", "greet.django", "--task", "shop.greet", "--schedule", "1",
                     "--kwargs", '{"name": "django"}', "--option", "jitter_ms=0")  # fmt: skip
    assert (stored["task"], stored["kwargs"], stored["schedule"]) == ("shop.greet", {"name": "django"}, "1")
    greeted = wait_for(lambda: ticks(tmp_path / "shop.sqlite3", "greet.django"), timeout=15)
    assert greeted[0]["note"] == "hello django"
    assert as_json(project, "delete", "greet.django")["source"] == "code"

    checked = project.ok("leasecron", "check")
    assert checked.splitlines()[-1] == "ok" and "schema        ok" in checked

    runner.signal(signal.SIGTERM)
    assert runner.finish() == 0


def test_the_verbs_refuse_what_the_project_does_not_have(project: Project) -> None:
    """A job the project does not register, a stored job under the name of the project's job, kwargs
    its task does not take, a bad option: one line on stderr, exit 2; a failure: exit 1."""
    project.ok("leasecron", "check")  # creates the store's schema
    cases = [
        (["pause", "shop.nope"], 2, "job 'shop.nope' is not a job of the app (its jobs: 'shop.tick')"),
        (["trigger", "shop.nope"], 2, "job 'shop.nope' is not a job of the app"),
        (["put", "shop.tick", "--task", "shop.greet", "--schedule", "60"], 2,
         "'shop.tick' is a job of the project, in code: use `manage.py leasecron reschedule`"),
        (["put", "g", "--task", "shop.greet", "--schedule", "60", "--kwargs", '{"nope": 1}'], 2,
         "stored job 'g': kwargs do not fit task 'shop.greet'"),
        (["reschedule", "shop.tick"], 2, "give EXPR (a cron string, or an interval in seconds) or --reset"),
        (["runs", "--limit", "0"], 2, "--limit must be at least 1, not 0"),
        (["delete", "nothing"], 2, "the store holds no stored job 'nothing'"),
        (["show", "shop.tick", "1000"], 1, "no run of job 'shop.tick' at slot 1000"),
    ]  # fmt: skip
    for args, code, message in cases:
        done = project.manage("leasecron", *args)
        assert (done.returncode, done.stdout) == (code, ""), (args, done.stderr)
        assert f"CommandError: leasecron {args[0]}: {message}" in done.stderr, (args, done.stderr)
    done = project.manage("leasecron", "demo")
    assert done.returncode != 0 and "invalid choice: 'demo'" in done.stderr


def test_each_verb_takes_the_cli_options_but_the_url_and_app(project: Project) -> None:
    """Each verb's --help lists the `leasecron` command's options, with no URL, --app or module:attr;
    trigger's --max-late-ms defaults to the job's own."""
    for verb, options in {
        "runs": ["--job", "--limit", "--json"], "jobs": ["--json"], "show": ["--json"],
        "pause": ["--note", "--by", "--json"], "resume": ["--by", "--json"],
        "trigger": ["--wait", "--timeout", "--by", "--json", "--max-late-ms"],
        "reschedule": ["--tz", "--reset", "--by", "--json"],
        "put": ["--task", "--schedule", "--tz", "--kwargs", "--option", "--by", "--json"],
        "delete": ["--by", "--json"], "instances": ["--json"], "check": [], "run": ["--log-level"],
        "dashboard": ["--host", "--port", "--read-only", "--password"],
    }.items():  # fmt: skip
        shown = project.ok("leasecron", verb, "--help")
        usage = shown.split("\n\n")[0]
        assert usage.startswith(f"usage: manage.py leasecron {verb}"), shown
        for option in options:
            assert option in usage, (verb, option, usage)
        assert "URL" not in usage and "--app" not in usage and "module:attr" not in usage, (verb, usage)
    assert "(default: the job's max_late_ms)" in project.ok("leasecron", "trigger", "--help")


def test_dashboard_serves_the_project_store_and_jobs(project: Project) -> None:
    """`manage.py leasecron dashboard --port 0` serves the dashboard of the project's store with the
    project's jobs (as `leasecron dashboard --app`); SIGTERM stops it with exit 0."""
    project.ok("leasecron", "check")  # the dashboard creates no store
    served = project.start("leasecron", "dashboard", "--port", "0")
    line = served.lines[served.wait_line(r"leasecron dashboard on http://")]
    match = re.search(r"leasecron dashboard on (http://\S+) \((.*)\); SIGTERM", line)
    assert match is not None, line
    assert "actions allowed; no password; store SQLiteStore(" in match.group(2)
    assert "jobs of the cron of Django project settings" in match.group(2)
    with urllib.request.urlopen(match.group(1) + "api/jobs", timeout=10) as response:
        jobs = by_job(json.loads(response.read())["jobs"])
    assert jobs["shop.tick"]["schedule"] == "every 1h 00m"
    served.signal(signal.SIGTERM)
    assert served.finish() == 0


def test_run_creates_the_store_and_dashboard_refuses_a_store_that_does_not_exist(project: Project,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    """The project's store as the `leasecron` command treats it: the read-only verbs and the
    dashboard create nothing (a missing SQLite file is an error naming it); check creates it."""
    done = project.manage("leasecron", "dashboard", "--port", "0")
    assert done.returncode == 1 and "leasecron.db' does not exist" in done.stderr, done.stderr
    done = project.manage("leasecron", "runs")
    assert done.returncode == 1 and "does not exist" in done.stderr
    assert not (tmp_path / "leasecron.db").exists()
    project.ok("leasecron", "check")
    with open_store(f"sqlite:///{tmp_path / 'leasecron.db'}", create=False) as store:
        assert store.jobs() == []
