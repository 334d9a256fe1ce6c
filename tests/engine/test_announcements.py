"""Instances in the store, on real instances: a started instance announces itself with its poll,
says again what it registers when that changes, and withdraws on stop.

The store-level operations are proved on every store in tests/stores/test_instances.py; here the
engine is run on the in-process stores and one server store of each kind.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Optional

import pytest

import leasecron
from leasecron.announcements import AnnouncedJob, LiveInstance
from tests.engine.conftest import MakeCron
from tests.engine.support import HOURLY
from tests.helpers import wait_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgresql"], indirect=True),
]

#: How often the instances poll in these tests, in ms.
POLL = 100


def noop(**kwargs: Any) -> None:
    """A handler that does nothing."""


def listed(cron: leasecron.LeaseCron, runner: str) -> Optional[LiveInstance]:
    """The live instance ``runner`` as ``cron``'s store lists it, or None."""
    return next((i for i in cron.store.instances() if i.runner == runner), None)


def test_a_started_instance_announces_what_it_registers_and_withdraws_on_stop(make_cron: MakeCron) -> None:
    cron = make_cron("web-1", poll_ms=POLL)
    cron.add_job(noop, HOURLY, name="tick")
    cron.add_job(noop, 30, name="every-30s")
    cron.add_job(noop, "0 9 * * 1-5", name="report", tz="Europe/Berlin")
    cron.task("send_report")(noop)
    assert cron.store.instances() == []  # registering announces nothing: only a started instance does
    before = cron.store.now_ms()
    cron.start()
    instance = wait_for(lambda: listed(cron, "web-1"), 10)
    said = instance.announcement
    assert (said.host, said.pid, said.version) == (socket.gethostname(), os.getpid(), leasecron.__version__)
    assert said.jobs == (
        AnnouncedJob("every-30s", "30", "UTC"),
        AnnouncedJob("report", "0 9 * * 1-5", "Europe/Berlin"),
        AnnouncedJob("tick", str(HOURLY), "UTC"),
    )
    assert said.tasks == ("send_report",)
    assert before <= instance.started_ms <= instance.seen_ms
    cron.stop(timeout=2)
    assert listed(cron, "web-1") is None


def test_a_job_added_or_removed_while_running_is_announced_at_the_next_poll(make_cron: MakeCron) -> None:
    """Not 10 s later: the next poll carries the new announcement; the start stays."""
    cron = make_cron("web-2", poll_ms=POLL)
    cron.add_job(noop, HOURLY, name="tick")
    cron.start()
    first = wait_for(lambda: listed(cron, "web-2"), 10)
    cron.add_job(noop, "*/5 * * * *", name="later")
    changed = wait_for(lambda: (i := listed(cron, "web-2")) and len(i.announcement.jobs) == 2 and i, 5)
    assert [job.name for job in changed.announcement.jobs] == ["later", "tick"]
    assert changed.started_ms == first.started_ms
    cron.remove_job("tick")
    wait_for(lambda: [j.name for j in listed(cron, "web-2").announcement.jobs] == ["later"], 5)  # type: ignore[union-attr]


def test_two_instances_are_listed_each_with_its_own_runner(make_cron: MakeCron) -> None:
    crons = [make_cron(runner, poll_ms=POLL) for runner in ("a", "b")]
    for cron in crons:
        cron.add_job(noop, HOURLY, name="tick")
        cron.start()
    wait_for(lambda: sorted(i.runner for i in crons[0].store.instances()) == ["a", "b"], 10)
    crons[0].stop(timeout=2)
    assert [i.runner for i in crons[1].store.instances()] == ["b"]
