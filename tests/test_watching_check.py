"""``leasecron check URL --app module:attr`` (issue 32, "Watching it"): beyond the store's checks,
exit 1 naming each overdue job, with ``--failed`` each job whose last run failed, ``--json``;
run as a real command on every store that processes share, and in process on the memory store.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Dict, Optional

from leasecron import MemoryStore, open_store
from leasecron.cli.commands import check_report
from tests.cli_support import EXAMPLES, copy_example, environment, run
from tests.conftest import Backend
from tests.engine.support import NEVER_LATE
from tests.test_watching import Scene

#: The scene's jobs (tests/test_watching.py), registered by an app, each due daily, 1 s late at most.
APP = """
import os
import leasecron

cron = leasecron.LeaseCron(os.environ["LEASECRON_STORE"], runner="ops", max_late_ms=1_000)
cron.task("t")(lambda: None)
for name in os.environ["APP_JOBS"].split(","):
    cron.add_job(lambda: None, 86_400, name=name)
"""
JOBS = "late,fine,broken,cut,resting,fresh"


def cli(*args: str, cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``python -m leasecron ARGS``, its output captured."""
    return run(["-m", "leasecron", *args], cwd=cwd, env=env)


def test_check_names_the_overdue_and_failed_jobs_on_every_shared_store(process_backend: Backend,
                                                                        tmp_path: Path) -> None:  # fmt: skip
    """With --app: exit 1 and one OVERDUE line for the overdue job (the paused one, the one that
    ran, the one never run and the stored job whose schedule changed since are not); --failed
    adds the failing one; --json says the same; the URL may be left out; an app whose jobs are
    all well exits 0 and ends with ``ok``; --failed without --app is a usage error."""
    store = process_backend.open()
    Scene(store)
    url = process_backend.url()
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    env = {**environment(url), "APP_JOBS": JOBS}

    result = cli("check", url, "--app", "app:cron", cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"store         {store.kind}")
    assert "jobs          7 watched (registered by the app, or stored): 1 overdue" in lines
    [overdue] = [line for line in lines if line.startswith("OVERDUE")]
    assert overdue.startswith("OVERDUE       late: its slot ") and "(max_late_ms 1000 + 10 s)" in overdue
    assert not [line for line in lines if line.startswith("FAILED")]
    assert lines[-1] == "not ok: 1 overdue, 0 failed"

    failed = cli("check", "--app", "app:cron", "--failed", cwd=tmp_path, env=env)  # the app's store
    assert failed.returncode == 1, failed.stderr
    assert [line.split(":")[0] for line in failed.stdout.splitlines() if line[:7] in ("OVERDUE", "FAILED ")] == [
        "OVERDUE       late", "FAILED        broken"]  # fmt: skip
    assert "FAILED        broken: its last run (slot " in failed.stdout and ") failed: boom" in failed.stdout

    data = json.loads(cli("check", url, "--app", "app:cron", "--failed", "--json", cwd=tmp_path, env=env).stdout)
    assert (data["ok"], data["overdue"], data["failed"], data["store"]) == (False, ["late"], ["broken"], store.kind)
    jobs = {job["job"]: job for job in data["jobs"]}
    assert sorted(jobs) == ["broken", "cut", "fine", "fresh", "kept", "late", "resting"]
    assert jobs["resting"]["paused"] and not jobs["resting"]["overdue"]
    assert jobs["late"]["overdue_slot_ms"] is not None and jobs["broken"]["last_run"]["status"] == "failed"

    well = cli("check", url, "--app", "app:cron", "--failed", cwd=tmp_path, env={**env, "APP_JOBS": "fine,cut"})
    assert well.returncode == 0, well.stderr
    assert well.stdout.splitlines()[-1] == "ok"
    assert "jobs          3 watched (registered by the app, or stored): 0 overdue, 0 failed" in well.stdout

    usage = cli("check", url, "--failed", cwd=tmp_path, env=env)
    assert usage.returncode == 2 and "--failed needs --app" in usage.stderr and "Traceback" not in usage.stderr


def test_check_without_an_app_checks_the_store_only(tmp_path: Path) -> None:
    """No --app: the store's checks alone, exit 0 even with a job overdue; --json gives the figures."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    plain = cli("check", url, "--json")
    assert plain.returncode == 0, plain.stderr
    data = json.loads(plain.stdout)
    assert (data["ok"], data["overdue"], data["failed"], data["store"], data["jobs_with_runs"]) == (
        True, [], [], "sqlite", 0)  # fmt: skip
    assert data["round_trip_ms"]["calls"] == 20 and "jobs" not in data
    nothing = cli("check", cwd=tmp_path)
    assert nothing.returncode == 2 and "give a store URL, or --app" in nothing.stderr


def test_check_report_on_the_memory_store() -> None:
    """In process (the memory store is one process's): the same verdicts, and the text for each."""
    scene = Scene(MemoryStore())
    lines, code = check_report(scene.store, scene.cron)
    assert code == 1 and [line[:19] for line in lines if line.startswith("OVERDUE")] == ["OVERDUE       late:"]
    lines, code = check_report(scene.store, scene.cron, failed=True)
    assert code == 1 and [line[:21] for line in lines if line.startswith("FAILED")] == ["FAILED        broken:"]
    [text], code = check_report(scene.store, scene.cron, failed=True, as_json=True)
    assert code == 1 and json.loads(text)["failed"] == ["broken"]


def test_the_kubernetes_check_cronjob_runs_its_command_on_the_example_app(tmp_path: Path) -> None:
    """examples/kubernetes/check-cronjob.yaml runs `leasecron check --app tasks:cron --failed` (exec
    form, one try, Never restarted) in the directory of examples/scripts/tasks.py: run for real,
    it exits 0 on a fresh store and 1 naming "report" once its last run failed."""
    text = (EXAMPLES / "kubernetes" / "check-cronjob.yaml").read_text()
    command = re.search(r"^\s+command: (\[.*\])$", text, re.M)
    assert command is not None and "\t" not in text
    argv = json.loads(command.group(1))
    assert argv[:2] == ["leasecron", "check"] and "--failed" in argv
    for setting in ("kind: CronJob", "restartPolicy: Never", "backoffLimit: 0", "concurrencyPolicy: Forbid",
                    "workingDir: /app", "name: LEASECRON_STORE"):  # fmt: skip
        assert setting in text, setting
    copy_example("scripts/tasks.py", tmp_path)
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    env = environment(url)
    fresh = cli(*argv[1:], cwd=tmp_path, env=env)
    assert fresh.returncode == 0 and fresh.stdout.splitlines()[-1] == "ok", fresh.stdout + fresh.stderr
    with open_store(url) as store:
        slot = store.now_ms() - 60_000
        won = store.claim("report", slot, runner="pod-1", max_late_ms=NEVER_LATE).run
        assert won is not None and store.finish("report", slot, won.token, "failed", "OSError: disk full")
    failed = cli(*argv[1:], cwd=tmp_path, env=env)
    assert failed.returncode == 1 and "FAILED        report: " in failed.stdout and "OSError: disk full" in (
        failed.stdout)  # fmt: skip
