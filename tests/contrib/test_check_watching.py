"""``flask leasecron check`` (issue 32, "Watching it"): the app's store checked and every job the
app knows watched: exit 1 naming each overdue job, ``--failed`` each failing one, ``--json``; on
every store."""

from __future__ import annotations

import json

from leasecron.contrib.flask import LeaseCronExtension
from tests.conftest import Backend
from tests.contrib.test_flask import make_app
from tests.test_watching import DAILY, LATE_MS, Scene


def test_flask_leasecron_check_names_overdue_and_failed_jobs(backend: Backend) -> None:
    """The scene's jobs registered by a Flask app: exit 1 naming the overdue job; --failed adds the
    failing one; --json; an app whose jobs are well exits 0 with ``ok``."""
    store = backend.open()
    Scene(store)

    def invoke(jobs: str, *args: str) -> "tuple[int, str]":
        ext = LeaseCronExtension(max_late_ms=LATE_MS)
        for name in jobs.split(","):
            ext.add_job(lambda: None, DAILY, name=name)
        app = make_app(f"check-{jobs}", store)
        ext.init_app(app)
        result = app.test_cli_runner().invoke(args=["leasecron", "check", *args])
        return result.exit_code, result.output

    code, out = invoke("late,fine,broken,resting")
    assert code == 1, out
    assert [line[:19] for line in out.splitlines() if line.startswith(("OVERDUE", "FAILED"))] == [
        "OVERDUE       late:"]  # fmt: skip
    assert out.splitlines()[-1] == "not ok: 1 overdue, 0 failed"
    code, out = invoke("late,fine,broken,resting", "--failed")
    assert code == 1 and "FAILED        broken: its last run (slot " in out, out
    code, out = invoke("late,fine,broken,resting", "--failed", "--json")
    data = json.loads(out)
    assert (code, data["ok"], data["overdue"], data["failed"]) == (1, False, ["late"], ["broken"])
    code, out = invoke("fine,resting", "--failed")
    assert code == 0 and out.splitlines()[-1] == "ok", out
