"""The Flask extension (leasecron.contrib.flask): config, jobs in the app context, the
``flask leasecron`` commands; real stores, real runs, and the example app as a real process."""

from __future__ import annotations

import json
import re
import signal
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, List, Tuple

import flask
import pytest
from flask import Flask, current_app

import leasecron
from leasecron.announcements import AnnouncedJob, Announcement
from leasecron import ConfigError, Context, MemoryStore, Store
from leasecron.contrib.flask import CONFIG_KEYS, LeaseCronExtension
from leasecron.options import JobOptions
from leasecron.formatting import utc_time
from tests.cli_support import Process, copy_example, environment, parse_table, run
from tests.docs.readme_examples import README, readme_examples
from tests.conftest import BACKENDS, Backend
from tests.helpers import wait_for

#: A job every hour whose latest slot is always caught up at start (no jitter): it runs at once.
HOURLY = 3600
FAST = {
    "LEASECRON_LEASE_MS": 500,
    "LEASECRON_HEARTBEAT_MS": 100,
    "LEASECRON_JITTER_MS": 0,
    "LEASECRON_CATCH_UP_MS": 3_660_000,
}


def make_app(name: str, store: Any = "memory://", **config: Any) -> Flask:
    """A Flask app with ``LEASECRON_STORE`` and the fast options set, plus ``config``."""
    app = Flask(name)
    app.config.update(LEASECRON_STORE=store, **FAST, **config)
    return app


def succeeded(store: Store, job: str, timeout: float = 10) -> leasecron.Run:
    """Wait for a run of ``job`` that succeeded (or fail on one that did not)."""

    def done() -> Any:
        runs = [r for r in store.runs(job) if r.finished]
        assert all(r.status == "success" for r in runs), [(r.status, r.error) for r in runs]
        return runs[0] if runs else None

    return wait_for(done, timeout, message=f"no finished run of {job!r} within {timeout} s")


# -- jobs in the app context ---------------------------------------------------------------


def test_job_and_event_callback_run_inside_the_app_context(backend: Backend) -> None:
    """A job sees current_app, the app's config and a g of its own; the app context is torn down
    after it; an event callback runs in the app context too."""
    ext = LeaseCronExtension()
    seen: List[Tuple[str, str, str, int]] = []
    torn_down: List[Any] = []
    events: List[Tuple[str, str]] = []

    @ext.job(HOURLY, name="in-context")
    def job(ctx: Context) -> None:
        flask.g.slot = ctx.slot_ms
        seen.append((current_app.name, current_app.config["GREETING"], ctx.job, ctx.slot_ms))

    ext.on("success", lambda event: events.append((current_app.name, event.job)))
    store = backend.open()
    app = make_app("ctx-app", store, GREETING="hello")
    app.teardown_appcontext(lambda exc: torn_down.append(flask.g.get("slot")))
    cron = ext.init_app(app)
    assert app.extensions["leasecron"] is cron and ext.get_cron(app) is cron
    assert not cron.running, "init_app must not start the cron"
    try:
        ext.start(app)
        run = succeeded(store, "in-context")
        wait_for(lambda: events, 5, message="no success event")
    finally:
        ext.stop(app, timeout=2)
    assert seen == [("ctx-app", "hello", "in-context", run.slot_ms)]
    assert run.slot_ms in torn_down, "the job's app context was not torn down"
    assert events == [("ctx-app", "in-context")]


def test_one_extension_serves_several_apps_each_with_its_own_cron() -> None:
    """App factories: each app gets its own LeaseCron; a job added after init_app reaches every app;
    each job runs in the context of its own app."""
    ext = LeaseCronExtension()
    seen: List[Tuple[str, str]] = []
    lock = threading.Lock()

    def record(ctx: Context) -> None:
        with lock:
            seen.append((current_app.name, ctx.job))

    ext.add_job(record, HOURLY, name="early")
    stores = {"app-a": MemoryStore(), "app-b": MemoryStore()}
    apps = [make_app(name, store, LEASECRON_RUNNER=name) for name, store in stores.items()]
    crons = [ext.init_app(app) for app in apps]
    ext.add_job(record, HOURLY, name="late")
    assert crons[0] is not crons[1] and [c.runner for c in crons] == ["app-a", "app-b"]
    assert all(sorted(c.jobs) == ["early", "late"] for c in crons)
    try:
        for app in apps:
            ext.start(app)
        for store in stores.values():
            succeeded(store, "early")
            succeeded(store, "late")
    finally:
        for app in apps:
            ext.stop(app, timeout=2)
    assert sorted(seen) == [("app-a", "early"), ("app-a", "late"), ("app-b", "early"), ("app-b", "late")]


def test_get_cron_and_constructor_with_app() -> None:
    """LeaseCronExtension(app) calls init_app; get_cron() without an app uses the current app."""
    app = make_app("direct")
    ext = LeaseCronExtension(app)
    with app.app_context():
        assert ext.get_cron() is app.extensions["leasecron"]
    with pytest.raises(ConfigError, match="has no leasecron"):
        LeaseCronExtension().get_cron(make_app("bare"))


# -- configuration ---------------------------------------------------------------------------


def test_every_config_key_sets_its_option() -> None:
    """Each LEASECRON_* key reaches the LeaseCron; integers may be strings (from the environment)."""
    values = {
        "LEASECRON_RUNNER": "runner-7",
        "LEASECRON_LEASE_MS": "45_000",
        "LEASECRON_HEARTBEAT_MS": 4000,
        "LEASECRON_MAX_ATTEMPTS": "5",
        "LEASECRON_OVERLAP": "allow",
        "LEASECRON_CATCH_UP_MS": 0,
        "LEASECRON_MAX_LATE_MS": 7000,
        "LEASECRON_JITTER_MS": 250,
        "LEASECRON_HISTORY_SIZE": 12,
        "LEASECRON_TZ": "Europe/Paris",
        "LEASECRON_STOP_TIMEOUT_MS": "2500",
        "LEASECRON_CLAIM_THREADS": 2,
        "LEASECRON_POLL_MS": "250",
        "LEASECRON_TIMEOUT_MS": "60_000",
        "LEASECRON_RETRIES": "2",
        "LEASECRON_RETRY_DELAY_MS": 500,
        "LEASECRON_LEASE_MARGIN_MS": "1500",
    }
    assert set(values) | {"LEASECRON_STORE"} == set(CONFIG_KEYS)
    ext = LeaseCronExtension()
    ext.add_job(lambda: None, "0 6 * * *", name="j")
    app = Flask("keys")
    app.config.update(LEASECRON_STORE="memory://", **values)
    cron = ext.init_app(app)
    assert isinstance(cron.store, MemoryStore)
    assert (cron.runner, cron.stop_timeout_ms, cron._claim_threads, cron.poll_ms) == ("runner-7", 2500, 2, 250)
    assert cron.jobs["j"].options == JobOptions(
        lease_ms=45_000, heartbeat_ms=4000, max_attempts=5, overlap="allow", catch_up_ms=0,
        max_late_ms=7000, jitter_ms=250, history_size=12, tz="Europe/Paris", timeout_ms=60_000, retries=2,
        retry_delay_ms=500, lease_margin_ms=1500,
    )  # fmt: skip


def test_config_wins_over_constructor_options() -> None:
    """The app's config overrides the constructor's options; a key left out or None keeps them."""
    ext = LeaseCronExtension(store="memory://", lease_ms=40_000, runner="from-code")
    ext.add_job(lambda: None, HOURLY, name="j")
    app = Flask("override")
    app.config.update(LEASECRON_LEASE_MS=50_000, LEASECRON_RUNNER=None)
    cron = ext.init_app(app)
    assert (cron.jobs["j"].options.lease_ms, cron.runner) == (50_000, "from-code")
    plain = ext.init_app(Flask("plain"))
    assert plain.jobs["j"].options.lease_ms == 40_000


@pytest.mark.parametrize(
    "config, message",
    [
        ({"LEASECRON_STORE": None}, "LEASECRON_STORE is not set"),
        ({"LEASECRON_LEASE": 10}, "unknown Flask config key 'LEASECRON_LEASE' (did you mean 'LEASECRON_LEASE_MS'?)"),
        ({"LEASECRON_START": True}, "unknown Flask config key 'LEASECRON_START'"),
        ({"LEASECRON_LEASE_MS": -1}, "Flask config LEASECRON_LEASE_MS: lease_ms must be >= 3"),
        ({"LEASECRON_LEASE_MS": "30s"}, "Flask config LEASECRON_LEASE_MS must be an integer"),
        ({"LEASECRON_OVERLAP": "never"}, "Flask config LEASECRON_OVERLAP: overlap must be 'skip' or 'allow'"),
        ({"LEASECRON_TZ": "Mars/Olympus"}, "Flask config LEASECRON_TZ: tz: unknown time zone"),
        ({"LEASECRON_STORE": "mongodb://x"}, "Flask config LEASECRON_STORE: unknown store URL scheme 'mongodb'"),
        ({"LEASECRON_STORE": 42}, "Flask config LEASECRON_STORE must be a store URL or a leasecron Store"),
        ({"LEASECRON_STOP_TIMEOUT_MS": -5}, "stop_timeout_ms must be an integer from 0"),
        ({"LEASECRON_POLL_MS": 0}, "poll_ms must be an integer from 1"),
        ({"LEASECRON_RETRIES": -1}, "Flask config LEASECRON_RETRIES: retries must be >= 0"),
        ({"LEASECRON_TIMEOUT_MS": "soon"}, "Flask config LEASECRON_TIMEOUT_MS must be an integer"),
        (
            {"LEASECRON_TIMEOUT_MS": 1000},
            "leasecron settings of Flask app 'bad': timeout_ms (1000) must be at least heartbeat_ms (5000, the"
            " default)",
        ),
        (
            {"LEASECRON_HEARTBEAT_MS": 20_000},
            "leasecron settings of Flask app 'bad': heartbeat_ms (20000) must be under half of lease_ms"
            " (30000, the default)",
        ),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, str) else None,
)
def test_bad_config_is_a_config_error_naming_the_key(config: dict, message: str) -> None:
    """A missing store, an unknown LEASECRON_* key (a typo) or a bad value fails init_app, naming it;
    the app is left without leasecron."""
    ext = LeaseCronExtension()
    ext.add_job(lambda: None, HOURLY, name="j")
    app = Flask("bad")
    app.config.update({"LEASECRON_STORE": "memory://", **config})
    with pytest.raises(ConfigError) as info:
        ext.init_app(app)
    assert message in str(info.value)
    assert "leasecron" not in app.extensions


def test_registration_errors_are_raised_at_once() -> None:
    """What needs no app config is checked when a job is registered: handler, schedule, option
    names and values, duplicate names, event names; the constructor's option names."""
    ext = LeaseCronExtension()
    ext.add_job(lambda: None, HOURLY, name="taken")
    cases = [
        (lambda: ext.add_job(lambda: None, "61 * * * *", name="cron"), "job 'cron': schedule: not a valid cron"),
        (lambda: ext.add_job(lambda: None, HOURLY, name="opt", lease=5), "job 'opt': unknown option 'lease'"),
        (lambda: ext.add_job(lambda: None, HOURLY, name="neg", jitter_ms=-1), "job 'neg': jitter_ms must be >= 0"),
        (lambda: ext.add_job(lambda: None, HOURLY, name="taken"), "job 'taken' is already registered"),
        (lambda: ext.add_job("not callable", HOURLY, name="x"), "must be callable"),
        (lambda: ext.add_job(lambda: None, HOURLY, name=" "), "non-empty string"),
        (lambda: ext.add_job(lambda: None, HOURLY, name="a\x00b"), "NUL"),
        (lambda: ext.on("finished", lambda e: None), "unknown event 'finished'"),
        (lambda: LeaseCronExtension(lease=5), "unknown option 'lease' (did you mean 'lease_ms'?)"),
    ]
    for call, message in cases:
        with pytest.raises(ConfigError) as info:
            call()
        assert message in str(info.value)


def test_init_app_twice_on_one_app_is_an_error() -> None:
    """A second init_app on the same app (two extensions, or a factory called twice on it) fails."""
    app = make_app("twice")
    LeaseCronExtension().init_app(app)
    with pytest.raises(ConfigError, match="already has leasecron"):
        LeaseCronExtension().init_app(app)


def test_decorated_function_is_returned_unchanged() -> None:
    """@ext.job returns the function itself; the registered handler keeps its signature."""
    ext = LeaseCronExtension()

    def no_context() -> str:
        return current_app.name

    assert ext.job(HOURLY, name="plain")(no_context) is no_context
    app = make_app("sig")
    job = ext.init_app(app).jobs["plain"]
    assert job.takes_context is False
    assert job.func() == "sig"  # the wrapper pushes the app context itself


# -- flask leasecron ... (app.test_cli_runner) ------------------------------------------------


def make_runs(store: Store) -> List[leasecron.Run]:
    """A success and a failed run of "report", and a released run of "cleanup"; returns them."""
    base = (store.now_ms() // 60_000 - 5) * 60_000
    kw: Any = dict(max_late_ms=3_600_000, lease_ms=60_000)
    ok = store.claim("report", base, runner="web-1", **kw).run
    assert store.finish("report", base, ok.token, "success")
    bad = store.claim("report", base + 60_000, runner="web-2", **kw).run
    assert store.finish("report", base + 60_000, bad.token, "failed", "ValueError: bad row 17")
    held = store.claim("cleanup", base, runner="web-3", **kw).run
    assert store.release("cleanup", base, held.token)
    return [store.get_run("report", base + 60_000), store.get_run("report", base), store.get_run("cleanup", base)]


def cli_app(store: Store) -> Tuple[Flask, LeaseCronExtension]:
    ext = LeaseCronExtension()
    ext.add_job(lambda: None, "0 0 1 1 *", name="report")
    app = make_app("cli-app", store)
    ext.init_app(app)
    return app, ext


def test_flask_leasecron_runs_jobs_and_check(backend: Backend) -> None:
    """`flask leasecron runs|jobs|check` read the app's own store: the runs table and --json, each
    job's schedule, last run and next slot, and the store check."""
    store = backend.open()
    newest, oldest, released = make_runs(store)
    app, ext = cli_app(store)
    runner = app.test_cli_runner()

    result = runner.invoke(args=["leasecron", "runs"])
    assert result.exit_code == 0, result.output
    rows = parse_table(result.output)
    assert [(r["job"], r["slot (UTC)"], r["runner"], r["status"], r["handed over"], r["error"]) for r in rows] == [
        ("cleanup", utc_time(released.slot_ms), "web-3", "running", "yes", "-"),
        ("report", utc_time(newest.slot_ms), "web-2", "failed", "no", "ValueError: bad row 17"),
        ("report", utc_time(oldest.slot_ms), "web-1", "success", "no", "-"),
    ]
    assert [r["lease left"] for r in rows] == ["released", "-", "-"]

    data = json.loads(runner.invoke(args=["leasecron", "runs", "--job", "report", "--json"]).output)
    assert data == [newest.to_dict(), oldest.to_dict()]
    limited = runner.invoke(args=["leasecron", "runs", "--job", "report", "--limit", "1", "--json"])
    assert json.loads(limited.output) == [newest.to_dict()]

    jobs = runner.invoke(args=["leasecron", "jobs"])
    assert jobs.exit_code == 0, jobs.output
    next_slot = ext.get_cron(app).jobs["report"].schedule.next_after(store.now_ms())
    listed_rows = {row["job"]: row for row in parse_table(jobs.output)}
    report = listed_rows["report"]
    assert (report["schedule"], report["runs"], report["last slot (UTC)"], report["status"], report["runner"]) == (
        "0 0 1 1 *", "2", utc_time(newest.slot_ms), "failed", "web-2"
    )
    assert report["finished"].endswith(" ago") and report["next slot (UTC)"] == utc_time(next_slot)
    assert report["next"].startswith("in ")
    cleanup = listed_rows["cleanup"]
    assert (cleanup["schedule"], cleanup["runs"], cleanup["next slot (UTC)"]) == ("(not in app)", "1", "-")
    listed = json.loads(runner.invoke(args=["leasecron", "jobs", "--json"]).output)
    summary = [(j["job"], j["registered"], j["stored_runs"]) for j in listed]
    assert summary == [("cleanup", False, 1), ("report", True, 2)]
    assert listed[1]["last_run"] == newest.to_dict() and listed[1]["next_slot_ms"] == next_slot

    assert runner.invoke(args=["leasecron", "instances"]).output.startswith("No live instance in ")
    store.announce(Announcement("web-9", "host-9", 99, "0.3.0", (AnnouncedJob("report", "0 0 1 1 *", "UTC"),)))
    instances = json.loads(runner.invoke(args=["leasecron", "instances", "--json"]).output)
    assert [(i["runner"], i["pid"], i["jobs"]) for i in instances] == [
        ("web-9", 99, [{"name": "report", "schedule": "0 0 1 1 *", "tz": "UTC"}])
    ]

    check = runner.invoke(args=["leasecron", "check"])
    assert check.exit_code == 0, check.output
    assert re.search(rf"^store\s+{store.kind}\s", check.output, re.M) and check.output.rstrip().endswith("ok")


def test_flask_leasecron_bad_option_exits_2() -> None:
    """A bad option of a `flask leasecron` command exits 2 with one line, as the leasecron command."""
    app, _ = cli_app(MemoryStore())
    result = app.test_cli_runner().invoke(args=["leasecron", "runs", "--limit", "0"])
    assert result.exit_code == 2
    assert "--limit must be at least 1" in result.output and "Traceback" not in result.output


def test_flask_leasecron_pause_resume_trigger_and_show(backend: Backend) -> None:
    """`flask leasecron pause|resume|trigger|show` on the app's store: pause with a note and --by
    (`jobs` shows it), resume; trigger prints the slot of a request that expires after the job's
    own max_late_ms + 10 s; show prints one run (`--json`: its to_dict()); a job that is not the
    app's, or a bad SLOT: exit 2 with one line."""
    store = backend.open()
    newest, _, _ = make_runs(store)
    app, ext = cli_app(store)
    runner = app.test_cli_runner()

    paused = runner.invoke(args=["leasecron", "pause", "report", "--note", "db migration", "--by", "ops@bastion"])
    assert paused.exit_code == 0, paused.output
    assert paused.output.startswith("Paused job 'report': by ops@bastion, ") and "note: db migration" in paused.output
    state = store.job_state("report")
    assert (state.paused, state.paused_by, state.note) == (True, "ops@bastion", "db migration")
    jobs = runner.invoke(args=["leasecron", "jobs"])
    assert {row["job"]: row["paused"] for row in parse_table(jobs.output)} == {"cleanup": "no", "report": "yes"}
    assert re.search(r"^  report  by ops@bastion, .*: db migration$", jobs.output, re.M), jobs.output
    resumed = runner.invoke(args=["leasecron", "resume", "report", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.output)["paused"] is False and not store.job_state("report").paused

    triggered = runner.invoke(args=["leasecron", "trigger", "report", "--by", "ops@bastion", "--json"])
    assert triggered.exit_code == 0, triggered.output
    request = json.loads(triggered.output)["request"]
    max_late_ms = ext.get_cron(app).jobs["report"].options.max_late_ms
    assert (request["job"], request["requested_by"], request["state"]) == ("report", "ops@bastion", "pending")
    assert request["expires_ms"] == request["slot_ms"] + max_late_ms + 10_000
    text = runner.invoke(args=["leasecron", "trigger", "report"])
    assert re.match(r"Requested a manual run of 'report': slot \d+ ", text.output), text.output

    shown = runner.invoke(args=["leasecron", "show", "report", str(newest.slot_ms)])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"^status\s+failed$", shown.output, re.M) and "error of attempt 1:" in shown.output
    iso = datetime.fromtimestamp(newest.slot_ms / 1000, tz=timezone.utc).isoformat()
    assert json.loads(runner.invoke(args=["leasecron", "show", "report", iso, "--json"]).output) == newest.to_dict()

    for args, message in [(["pause", "nope"], "job 'nope' is not a job of the app (its jobs: 'report')"),
                          (["trigger", "nope"], "use `leasecron trigger URL JOB`"),
                          (["show", "report", "noon"], "SLOT must be epoch milliseconds")]:  # fmt: skip
        bad = runner.invoke(args=["leasecron", *args])
        assert bad.exit_code == 2, (args, bad.output)
        assert message in bad.output and "Traceback" not in bad.output, (args, bad.output)
    assert not store.job_state("nope").requests and not store.job_state("nope").paused


def test_flask_leasecron_trigger_wait_exit_codes() -> None:
    """`flask leasecron trigger JOB --wait` with the app's cron started: exit 0 when the manual run
    succeeded, 1 when it failed (its error printed)."""
    ext = LeaseCronExtension()
    ext.add_job(lambda: None, "0 0 1 1 *", name="fine")

    @ext.job("0 0 1 1 *", name="broken")
    def broken() -> None:
        raise RuntimeError(f"broken in {current_app.name}")

    app = make_app("trigger-app", LEASECRON_POLL_MS=50)  # yearly jobs: no slot is caught up
    ext.init_app(app)
    runner = app.test_cli_runner()
    ext.start(app)
    try:
        fine = runner.invoke(args=["leasecron", "trigger", "fine", "--wait", "--timeout", "30"])
        assert fine.exit_code == 0, fine.output
        assert re.search(r"^success: the manual run of 'fine' .*; attempts: 1 \S+ success$", fine.output, re.M)
        failed = runner.invoke(args=["leasecron", "trigger", "broken", "--wait", "--timeout", "30"])
        assert failed.exit_code == 1, failed.output
        assert re.search(r"^failed: .*\nerror: RuntimeError: broken in trigger-app$", failed.output, re.M)
    finally:
        ext.stop(app, timeout=10)


# -- the example app, as real processes ---------------------------------------------------------


@pytest.mark.processes
@pytest.mark.timeout(90)
@pytest.mark.parametrize("store_name", ["default", "postgresql"])
def test_example_app_under_flask_leasecron_run(store_name: str, tmp_path: Path) -> None:
    """examples/flask/app.py, unchanged: `flask --app app leasecron run` runs the job (caught up at
    start) inside the app context, SIGTERM stops it with exit 0; `flask leasecron runs` and `jobs`
    show the run and the schedule. On the example's default SQLite file, and on PostgreSQL."""
    copy_example("flask/app.py", tmp_path)
    backend = BACKENDS[store_name](tmp_path) if store_name != "default" else None
    try:
        url = backend.url() if backend else f"sqlite:///{tmp_path / 'leasecron.db'}"
        env = environment(backend.url() if backend else None)
        proc = Process(["-m", "flask", "--app", "app", "leasecron", "run"], tmp_path, env)
        try:
            proc.wait_line(r"cleanup of slot .*: removing what is older than 30 days", timeout=20)
            store = leasecron.open_store(url)
            try:
                done = succeeded(store, "cleanup")
            finally:
                store.close()
            proc.signal(signal.SIGTERM)
            assert proc.finish() == 0, proc.stderr()
        finally:
            proc.kill()
        assert "Traceback" not in proc.stderr() and "stopped" in proc.stderr()

        runs = run(["-m", "flask", "--app", "app", "leasecron", "runs"], cwd=tmp_path, env=env)
        assert runs.returncode == 0, runs.stderr
        rows = parse_table(runs.stdout)
        assert [(r["job"], r["slot (UTC)"], r["attempt"], r["runner"], r["status"]) for r in rows] == [
            ("cleanup", utc_time(done.slot_ms), "1", done.runner, "success")
        ]
        jobs = run(["-m", "flask", "--app", "app", "leasecron", "jobs"], cwd=tmp_path, env=env)
        assert jobs.returncode == 0, jobs.stderr
        [job] = parse_table(jobs.stdout)
        assert (job["job"], job["schedule"], job["runs"], job["status"]) == ("cleanup", "*/5 * * * *", "1", "success")
    finally:
        if backend is not None:
            backend.close()


def test_readme_flask_section_shows_the_example_unchanged() -> None:
    """The README shows examples/flask/app.py exactly, as the tests above run it."""
    blocks = readme_examples(README.read_text(encoding="utf-8"))
    assert blocks["examples/flask/app.py"] == (README.parent / "examples/flask/app.py").read_text()
