"""settings.LEASECRON: what it takes, each problem with its id, the project's cron built from it,
and the apps' cron modules found when the apps are ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from leasecron import MemoryStore
from leasecron.contrib.django.conf import KEYS, OPTION_KEYS, PROBLEM_IDS, read_settings
from leasecron.contrib.django.project import DjangoLeaseCron
from leasecron.options import OPTIONS

from .conftest import FAST, Project


def ids(setting: Any) -> List[str]:
    settings, problems = read_settings(setting)
    assert (settings is None) == bool(problems)
    return [problem.id for problem in problems]


def test_every_option_is_taken_under_its_own_name() -> None:
    """STORE, runner and each LeaseCron option (leasecron.options.OPTIONS) are the keys; a valid
    value of each is read as given."""
    assert KEYS == ("STORE", "runner", *(option.name for option in OPTIONS))
    assert "runner" in OPTION_KEYS and "lease_ms" in OPTION_KEYS and "poll_ms" in OPTION_KEYS
    given: Dict[str, Any] = {
        "STORE": "sqlite:///leasecron.db", "runner": "web-1", "lease_ms": 60_000, "heartbeat_ms": 5_000,
        "max_attempts": 2, "overlap": "allow", "catch_up_ms": 0, "max_late_ms": 10_000, "jitter_ms": 0,
        "history_size": 10, "tz": "Europe/Paris", "timeout_ms": 600_000, "retries": 1, "retry_delay_ms": 500,
        "lease_margin_ms": 2_000, "stop_timeout_ms": 5_000, "claim_threads": 2, "poll_ms": 500,
    }  # fmt: skip
    assert set(given) == set(KEYS)
    settings, problems = read_settings(given)
    assert problems == [] and settings is not None
    assert settings.store == "sqlite:///leasecron.db"
    assert settings.options == {key: value for key, value in given.items() if key != "STORE"}


def test_a_store_object_and_none_values() -> None:
    """STORE may be a Store object; an option set to None is left to its default."""
    store = MemoryStore()
    settings, problems = read_settings({"STORE": store, "lease_ms": None, "tz": None})
    assert problems == [] and settings is not None
    assert settings.store is store and settings.options == {}
    assert settings.open_store() == (store, False)


@pytest.mark.parametrize(
    "setting, expected",
    [
        (None, ["leasecron.E001"]),
        (["STORE"], ["leasecron.E001"]),
        ({}, ["leasecron.E002"]),
        ({"STORE": None, "lease_ms": 1000}, ["leasecron.E002"]),
        ({"STORE": "nope://x"}, ["leasecron.E003"]),
        ({"STORE": "sqlite:///x.db?bogus=1"}, ["leasecron.E003"]),
        ({"STORE": 42}, ["leasecron.E003"]),
        ({"STORE": "memory://", "LEASE_MS": 1000, "lease": 5}, ["leasecron.E004"]),
        ({"STORE": "memory://", "lease_ms": "30000"}, ["leasecron.E005"]),
        ({"STORE": "memory://", "lease_ms": 2, "overlap": "maybe", "tz": "Mars/Olympus", "runner": ""},
         ["leasecron.E005"] * 4),
        ({"STORE": "memory://", "claim_threads": 0}, ["leasecron.E005"]),
        ({"STORE": "memory://", "lease_ms": 1000, "heartbeat_ms": 600}, ["leasecron.E006"]),
        ({"lease_ms": True, "x": 1}, ["leasecron.E004", "leasecron.E002", "leasecron.E005"]),
    ],
)  # fmt: skip
def test_each_problem_has_its_id(setting: Any, expected: List[str]) -> None:
    """Every problem is found at once, each with the id of its check message."""
    assert ids(setting) == expected
    assert set(expected) <= set(PROBLEM_IDS)


def test_the_messages_name_what_is_wrong() -> None:
    """An unknown key is named with the nearest known one; a bad value with the option and the value."""
    _, problems = read_settings({"STORE": "memory://", "LEASE_MS": 1, "lease": 5, "heartbeat_ms": "100"})
    unknown, bad = problems
    assert "'LEASE_MS' (did you mean 'lease_ms'?)" in unknown.message
    assert "'lease' (did you mean 'lease_ms'?)" in unknown.message
    assert unknown.hint is not None and "poll_ms" in unknown.hint
    assert bad.message == "settings.LEASECRON: heartbeat_ms must be an integer, not '100'"
    assert bad.hint is not None and "int(os.environ" in bad.hint
    _, (combined,) = read_settings({"STORE": "memory://", "lease_ms": 1000, "heartbeat_ms": 600})
    assert combined.message == "settings.LEASECRON: heartbeat_ms (600) must be under half of lease_ms (1000)"
    _, (store,) = read_settings({"STORE": "redis://:secret@localhost:6379/0?socket_timeout=abc"})
    assert store.id == "leasecron.E003" and "socket_timeout" in store.message and "secret" not in store.message


#: Printed by the project: what its cron is, and what its job got from the settings.
SHOW_CRON = """
from leasecron.contrib.django import cron, get_cron
from leasecron.contrib.django import project
import json
job = cron.jobs["shop.tick"]
print(json.dumps({
    "class": type(cron).__name__, "same": cron is get_cron() is project._cron, "runner": cron.runner,
    "store": repr(cron.store), "poll_ms": cron.poll_ms, "stop_timeout_ms": cron.stop_timeout_ms,
    "jobs": sorted(cron.jobs), "tasks": sorted(cron.tasks), "lease_ms": job.options.lease_ms,
    "tz": job.options.tz, "retries": job.options.retries, "running": cron.running,
}))
"""


def test_the_project_cron_is_built_from_the_settings_and_the_apps_cron_modules(project: Project,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    """`from leasecron.contrib.django import cron` is one DjangoLeaseCron, built from
    settings.LEASECRON; the test app's cron.py was imported when the apps got ready (its job and
    task are registered, with the settings' options), and nothing started it."""
    project.set({"STORE": f"sqlite:///{tmp_path / 'leasecron.db'}", **FAST, "runner": "web-7", "tz": "Europe/Paris",
                 "retries": 2, "stop_timeout_ms": 1234})  # fmt: skip
    shown = json.loads(project.ok("shell", "-v", "0", "-c", SHOW_CRON))
    assert shown == {
        "class": DjangoLeaseCron.__name__, "same": True, "runner": "web-7",
        "store": f"SQLiteStore('{tmp_path / 'leasecron.db'}', table='leasecron_runs')", "poll_ms": 200,
        "stop_timeout_ms": 1234, "jobs": ["shop.tick"], "tasks": ["shop.greet"], "lease_ms": 1000,
        "tz": "Europe/Paris", "retries": 2, "running": False,
    }  # fmt: skip


def test_a_bad_setting_stops_the_cron_not_the_project(project: Project) -> None:
    """With a problem in settings.LEASECRON the project still loads (no app's cron.py is imported,
    so that `manage.py check` can say what is wrong), and asking for the cron raises the problem."""
    project.set({"STORE": "memory://", "lease_ms": "30000"})
    done = project.manage("shell", "-v", "0", "-c", "import sys; print('shop.cron' in sys.modules)")
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
    done = project.manage("shell", "-v", "0", "-c", "from leasecron.contrib.django import cron")
    assert done.returncode == 1
    assert (
        "leasecron.errors.ConfigError: settings.LEASECRON: lease_ms must be an integer, not '30000': give a"
        " number; for a value from the environment: int(os.environ[...]); `manage.py check` lists each"
    ) in done.stderr
