"""The old names of earlier versions (leasecron.compat): every one still works and warns once with
its new place; and the instances of a process are listed by a public function (what the gunicorn
hooks use to find a cron running in the master)."""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys
import warnings
from typing import List

import pytest

import leasecron
from leasecron import MemoryStore, compat
from leasecron.cron import LeaseCron, instances

#: Every old name the 0.3 changelog lists as going in 1.0 (the test fails when the table changes
#: without this list, so a name never goes, or comes, unannounced).
OLD_NAMES = [
    "leasecron.scheduler.LeaseCron",
    "leasecron.scheduler.default_runner",
    "leasecron.runs.RUNNING",
    "leasecron.runs.SUCCESS",
    "leasecron.runs.FAILED",
    "leasecron.runs.INTERRUPTED",
    "leasecron.runs.SCHEDULE",
    "leasecron.runs.CATCH_UP",
    "leasecron.runs.TAKEOVER",
    "leasecron.runs.MANUAL",
    "leasecron.runs.WON",
    "leasecron.runs.STATUSES",
    "leasecron.runs.REASONS",
    "leasecron.runs.OUTCOMES",
    "leasecron.runs.FINISH_STATUSES",
    "leasecron.runs.Reason",
    "leasecron.live.FENCED",
    "leasecron.live.UNRENEWED",
    "leasecron.context.LOST",
    "leasecron.context.STOP",
    "leasecron.context.TIMEOUT",
    "leasecron.stores.base.MAX_INT",
    "leasecron.stores.base.MAX_NAME_BYTES",
    "leasecron.stores.base.OVERLAP_MODES",
    "leasecron.stores.base.check_text",
    "leasecron.stores.redis._load_scripts",
]


def test_the_table_of_old_names_is_the_list_the_changelog_announces() -> None:
    """No old name is added to or dropped from leasecron.compat without this list (and the changelog)."""
    assert sorted(compat.OLD_NAMES) == sorted(OLD_NAMES)


@pytest.mark.parametrize("old", OLD_NAMES)
def test_each_old_name_gives_the_new_value_and_warns_once_with_its_new_place(old: str) -> None:
    """Got as a module attribute, an old name is what its new place holds; the first use warns."""
    module_name, _, name = old.rpartition(".")
    module = importlib.import_module(module_name)
    compat._warned.discard(old)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated .* use {compat.OLD_NAMES[old]}"):
        value = getattr(module, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = getattr(module, name)  # the second use is silent
    new = compat._find(compat.OLD_NAMES[old])
    assert value == again == (new() if old in compat._CALLED else new)


def test_an_unknown_name_of_a_module_with_old_names_is_an_attribute_error() -> None:
    """A module with old names still raises AttributeError for a name it never had."""
    import leasecron.runs
    import leasecron.scheduler

    for module in (leasecron.runs, leasecron.scheduler):
        with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
            module.nothing  # noqa: B018


def _fresh(code: str) -> List[str]:
    """The lines ``code`` prints in a fresh interpreter, which must exit 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_from_import_of_the_old_path_works_in_a_fresh_interpreter() -> None:
    """``from leasecron.scheduler import LeaseCron`` works on its own (nothing imported before it)."""
    code = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    from leasecron.scheduler import LeaseCron\n"
        "except DeprecationWarning as exc:\n"
        "    print('warned:', exc)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "from leasecron.scheduler import LeaseCron\n"
        "from leasecron.live import FENCED\n"
        "import leasecron\n"
        "print(LeaseCron is leasecron.LeaseCron, FENCED == 'fenced')\n"
    )
    assert _fresh(code) == [
        "warned: leasecron.scheduler.LeaseCron is deprecated and goes in leasecron 1.0: use leasecron.cron.LeaseCron",
        "True True",
    ]


def test_the_package_itself_uses_no_old_name() -> None:
    """Importing every module of the package and its contrib warns nothing."""
    code = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "import leasecron, leasecron.cli, leasecron.stores.redis, leasecron.stores.postgres\n"
        "import leasecron.contrib.flask, leasecron.contrib.gunicorn, leasecron.contrib.prometheus\n"
        "import leasecron.contrib.dashboard\n"
        "print('quiet')\n"
    )
    assert _fresh(code) == ["quiet"]


def test_instances_lists_every_live_lease_cron_of_the_process() -> None:
    """``instances()`` holds a LeaseCron from construction until it is garbage; started or not."""
    cron = LeaseCron(MemoryStore(), runner="listed")
    assert cron in instances()
    assert all(isinstance(c, leasecron.LeaseCron) for c in instances())
    del cron
    gc.collect()
    assert "listed" not in [c.runner for c in instances()]
