"""Schedules as data in the Flask extension: ``LeaseCronExtension.task`` (on every app, also after
``init_app``, run inside the app context) and ``flask leasecron reschedule|put|delete|jobs`` on the
app's own store, with the app's jobs, tasks and defaults."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from flask import Flask, current_app

from leasecron import ConfigError, Context, MemoryStore, Store, open_store
from leasecron.contrib.flask import LeaseCronExtension
from tests.cli_support import parse_table
from tests.contrib.test_flask import make_app
from tests.helpers import wait_for


def schedules_app(store: Store, **config: Any) -> Tuple[Flask, LeaseCronExtension]:
    """An app with a yearly code job ``report`` (in Europe/Paris) and a task ``greet(ctx, who)``."""
    ext = LeaseCronExtension()
    ext.add_job(lambda: None, "0 0 1 1 *", name="report", tz="Europe/Paris")

    @ext.task("greet")
    def greet(ctx: Context, who: str) -> None:
        pass

    app = make_app("sched-app", store, **config)
    ext.init_app(app)
    return app, ext


def test_task_reaches_every_app_and_runs_in_its_context() -> None:
    """A task registered before init_app and one registered after reach every app's cron; a stored
    job of the task runs inside the app context with its kwargs; a task name twice is an error."""
    ext = LeaseCronExtension()
    seen: List[Tuple[str, str, str]] = []

    @ext.task("early")
    def early(ctx: Context, who: str) -> None:
        seen.append((current_app.name, ctx.job, who))

    stores = {"app-a": MemoryStore(), "app-b": MemoryStore()}
    apps = [make_app(name, store, LEASECRON_POLL_MS=50) for name, store in stores.items()]
    crons = [ext.init_app(app) for app in apps]

    @ext.task()
    def late() -> None:
        pass

    assert all(sorted(cron.tasks) == ["early", f"{__name__}.{late.__qualname__}"] for cron in crons)
    with pytest.raises(ConfigError, match="task 'early' is already registered"):
        ext.task("early")(early)
    for app, cron in zip(apps, crons):
        cron.put_job("hello", task="early", schedule=1, kwargs={"who": app.name})  # a slot every second
    both = {("app-a", "hello", "app-a"), ("app-b", "hello", "app-b")}
    try:
        for app in apps:
            ext.start(app)
        wait_for(lambda: set(seen) >= both, 10, message=f"the stored jobs did not both run: {seen}")
    finally:
        for app in apps:
            ext.stop(app, timeout=2)
    assert set(seen) == both


def test_flask_leasecron_reschedule_put_delete_and_jobs(tmp_path: Path) -> None:
    """`flask leasecron reschedule` overrides an app job (and --reset), `put` stores a job of a task,
    `jobs` shows the override in the job's zone and the stored job in the app's tz, `delete`
    deletes it; each writes the app's own store, with --by recorded."""
    url = f"sqlite:///{tmp_path / 'f.db'}"
    app, _ = schedules_app(open_store(url), LEASECRON_TZ="Asia/Tokyo")
    runner = app.test_cli_runner()

    def invoke(*args: str) -> Any:
        return runner.invoke(args=["leasecron", *args])

    moved = invoke("reschedule", "report", "30 6 * * *", "--by", "ops@bastion")
    assert moved.exit_code == 0, moved.output
    assert moved.output.startswith("Rescheduled job 'report': 30 6 * * *, tz the job's own (from the code); version 1,"
                                   " by ops@bastion")  # fmt: skip
    put = invoke("put", "greet-ann", "--task", "greet", "--schedule", "0 9 * * *", "--kwargs", '{"who": "ann"}',
                 "--option", "timeout_ms=60000", "--json")  # fmt: skip
    assert put.exit_code == 0, put.output
    job = json.loads(put.output)
    assert (job["task"], job["schedule"], job["tz"], job["kwargs"], job["options"]) == (
        "greet", "0 9 * * *", None, {"who": "ann"}, {"timeout_ms": 60000})  # fmt: skip

    jobs = invoke("jobs")
    assert jobs.exit_code == 0, jobs.output
    rows = {row["job"]: row for row in parse_table(jobs.output)}
    assert (rows["report"]["schedule"], rows["greet-ann"]["schedule"]) == (
        "30 6 * * * (Europe/Paris)", "0 9 * * * (Asia/Tokyo)")  # fmt: skip
    assert re.search(r"^  report     source override, schedule 30 6 \* \* \*, tz the job's, version 1; by ops@bastion",
                     jobs.output, re.M), jobs.output  # fmt: skip
    listed = {j["job"]: j for j in json.loads(invoke("jobs", "--json").output)}
    assert [(j["source"], j["version"], j["registered"]) for j in listed.values()] == [
        ("stored", 1, False), ("override", 1, True)]  # fmt: skip
    options = listed["greet-ann"]["options"]
    assert (options["timeout_ms"], options["tz"]) == (60000, "Asia/Tokyo")

    assert invoke("reschedule", "report", "--reset").exit_code == 0
    deleted = invoke("delete", "greet-ann")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.output.startswith("Deleted stored job 'greet-ann' (task greet, schedule 0 9 * * *); version 2")
    with open_store(url) as store:
        assert [(r.job, r.source, r.version) for r in store.schedule_changes(0).changes] == [
            ("report", "code", 2), ("greet-ann", "code", 2)]  # fmt: skip


CASES: Dict[Tuple[str, ...], str] = {
    ("reschedule", "elsewhere", "60"): "job 'elsewhere' is not a job of the app (its jobs: 'report')",
    ("reschedule", "report"): "give EXPR (a cron string, or an interval in seconds) or --reset",
    ("reschedule", "report", "61 * * * *"): "'report': schedule: not a valid cron expression",
    ("put", "report", "--task", "greet", "--schedule", "60"): "'report' is a job of the app, in code",
    ("put", "g", "--task", "greet", "--schedule", "60", "--kwargs", '{"whom": 1}'): "kwargs do not fit task 'greet'",
    ("put", "g", "--task", "greet", "--schedule", "60", "--kwargs", '{"who": 1}', "--option", "heartbeat_ms=300"):
        "heartbeat_ms (300) must be under half of lease_ms (500",
    ("delete", "g"): "the store holds no stored job 'g'",
}  # fmt: skip


@pytest.mark.parametrize("args", list(CASES), ids=lambda args: "-".join(args[:2]))
def test_flask_leasecron_bad_input_exits_2_and_stores_nothing(args: Tuple[str, ...]) -> None:
    """A job the app does not register, a missing EXPR, a bad cron string, a code job's name for `put`,
    kwargs the app's task does not take, options that do not go with the app's (lease_ms 500), a
    name without a stored job: exit 2 with the message; nothing is stored."""
    store = MemoryStore()
    app, _ = schedules_app(store)
    result = app.test_cli_runner().invoke(args=["leasecron", *args])
    assert result.exit_code == 2, result.output
    assert CASES[args] in result.output, result.output
    assert store.schedule_changes(0).changes == ()
