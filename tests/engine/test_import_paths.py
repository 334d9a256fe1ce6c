"""Names that moved keep their old import paths, and the instances of a process are listed by a
public function (what the gunicorn hooks use to find a cron running in the master)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

import leasecron
from leasecron import MemoryStore
from leasecron.cron import LeaseCron, instances


@pytest.mark.parametrize("name", ["LeaseCron", "default_runner"])
def test_the_old_scheduler_path_still_gives_the_moved_names_with_a_deprecation_warning(name: str) -> None:
    """``leasecron.scheduler.LeaseCron`` (0.1) is ``leasecron.cron.LeaseCron``, with a DeprecationWarning."""
    import leasecron.cron
    import leasecron.scheduler

    with pytest.warns(DeprecationWarning, match=f"leasecron.cron.{name}"):
        moved = getattr(leasecron.scheduler, name)
    assert moved is getattr(leasecron.cron, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        leasecron.scheduler.nothing  # noqa: B018


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
        "import leasecron\n"
        "print(LeaseCron is leasecron.LeaseCron)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "warned: leasecron.scheduler.LeaseCron moved to leasecron.cron.LeaseCron",
        "True",
    ]


def test_instances_lists_every_live_lease_cron_of_the_process() -> None:
    """``instances()`` holds a LeaseCron from construction until it is garbage; started or not."""
    cron = LeaseCron(MemoryStore(), runner="listed")
    assert cron in instances()
    assert all(isinstance(c, leasecron.LeaseCron) for c in instances())
    del cron
    gc.collect()
    assert "listed" not in [c.runner for c in instances()]
