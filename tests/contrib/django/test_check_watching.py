"""``manage.py leasecron check`` (issue 32, "Watching it"): the project's store checked and its jobs
watched: exit 1 naming shop.tick once a slot of it is overdue, ``--failed`` once its last run
failed, ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

from leasecron import open_store
from leasecron.schedules import make_schedule
from tests.contrib.django.conftest import Project
from tests.engine.support import NEVER_LATE

HOUR_MS = 3_600_000
#: shop.tick's options: due hourly (SHOP_EVERY's default), max_late_ms the default 30 s.
DUE_BY_MS = 30_000 + 10_000


def test_manage_py_leasecron_check_names_the_overdue_and_the_failed_job(project: Project, tmp_path: Path) -> None:
    """No run yet: ok. A run of shop.tick an hour before its latest slot due more than 40 s ago:
    exit 1, shop.tick overdue. That slot failed: not overdue, but --failed exits 1 naming it."""
    assert project.ok("leasecron", "check").splitlines()[-1] == "ok"  # creates the schema
    with open_store(f"sqlite:///{tmp_path / 'leasecron.db'}") as store:
        due = make_schedule(3600).at_or_before(store.now_ms() - DUE_BY_MS - 1)
        assert due is not None
        won = store.claim("shop.tick", due - HOUR_MS, runner="elsewhere", max_late_ms=NEVER_LATE).run
        assert won is not None and store.finish("shop.tick", due - HOUR_MS, won.token, "success")
        late = project.manage("leasecron", "check")
        assert late.returncode == 1, late.stderr
        assert "OVERDUE       shop.tick: its slot " in late.stdout and late.stdout.splitlines()[-1] == (
            "not ok: 1 overdue, 0 failed")  # fmt: skip
        data = json.loads(project.manage("leasecron", "check", "--json").stdout)
        assert (data["ok"], data["overdue"], [job["job"] for job in data["jobs"]]) == (False, ["shop.tick"],
                                                                                      ["shop.tick"])  # fmt: skip

        won = store.claim("shop.tick", due, runner="elsewhere", max_late_ms=NEVER_LATE).run
        assert won is not None and store.finish("shop.tick", due, won.token, "failed", "ValueError: no stock")
    assert project.ok("leasecron", "check").splitlines()[-1] == "ok"
    failed = project.manage("leasecron", "check", "--failed")
    assert failed.returncode == 1, failed.stderr
    assert "FAILED        shop.tick: its last run (slot " in failed.stdout and "failed: ValueError: no stock" in (
        failed.stdout)  # fmt: skip
    assert "--failed" in project.ok("leasecron", "check", "--help")
