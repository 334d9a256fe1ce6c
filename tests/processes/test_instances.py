"""Instances in the store with real worker processes: each announces itself (its pid, the job it
registers), a SIGTERM'd one is withdrawn as it stops, and a SIGKILL'd one stays listed, its last
refresh frozen, while a live one refreshes every 10 s, until it ages out 30 s after its last."""

from __future__ import annotations

import signal
from typing import Any, Dict

import pytest

from leasecron.announcements import ANNOUNCE_EVERY_MS, LiveInstance
from tests.helpers import wait_for

from .harness import Cluster

pytestmark = [
    pytest.mark.processes,
    pytest.mark.timeout(90),
    pytest.mark.parametrize("process_backend", ["sqlite"], indirect=True),
]

POLL_MS = 200


def _live(store: Any) -> Dict[str, LiveInstance]:
    return {instance.runner: instance for instance in store.instances()}


def test_processes_announce_themselves_a_stopped_one_is_withdrawn_a_killed_one_ages_out(
    cluster: Cluster, process_backend: Any
) -> None:
    workers = cluster.start_many(["p1", "p2", "p3"], every=3600.0, work=0.1, lease_ms=500, heartbeat_ms=100,
                                 poll_ms=POLL_MS)  # fmt: skip
    store = process_backend.open()
    live = wait_for(lambda: (found := _live(store)) and len(found) == 3 and found, 10)
    for worker in workers:
        said = live[worker.runner].announcement
        assert said.pid == worker.pid
        assert [job.name for job in said.jobs] == [cluster.job]

    p1, p2, p3 = workers
    p1.send(signal.SIGTERM)
    p1.assert_clean_exit(15)
    assert sorted(_live(store)) == ["p2", "p3"]  # withdrawn as it stopped, not aged out

    p2.kill()
    assert p2.wait_exit(5) == -signal.SIGKILL
    killed_seen = _live(store)["p2"].seen_ms  # still listed: nobody withdrew it
    alive_seen = _live(store)["p3"].seen_ms
    refreshed = wait_for(
        lambda: (found := _live(store)) and found["p3"].seen_ms > alive_seen and found,
        ANNOUNCE_EVERY_MS / 1000 + 5,
        message="the live worker did not refresh its announcement",
    )
    assert refreshed["p2"].seen_ms == killed_seen  # the killed one refreshes no more
    store.instance_ttl_ms = refreshed["p3"].seen_ms - killed_seen - 1  # as if its 30 s had passed
    assert sorted(_live(store)) == ["p3"]
