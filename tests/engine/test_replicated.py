"""An instance on a replicated Redis through Sentinel with ``replicas=2`` (rule 22): a write its
replicas did not confirm is never acted on.

While one of the two replicas is frozen (SIGSTOP), no claim the primary decided can be confirmed
by both: no handler starts, and the runner of a run already started cannot renew its lease, so
it fences itself (``lost``, ``unrenewed``) before a backup could take over. Once the replica
wakes, each claim sent meanwhile is sent again with its token and wins that same attempt, or a
backup takes a lease that ran out meanwhile over as the next attempt: every slot still runs once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Dict, Iterator, List, Tuple

import pytest

import leasecron
from leasecron import Context, Event, LeaseCron
from tests.conftest import required_binary
from tests.engine.support import FAST
from tests.helpers import wait_for
from tests.replicated import Replicated

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    """A primary, two replicas and three Sentinels of Redis."""
    with Replicated(required_binary("redis"), tmp_path_factory.mktemp("sentinel")) as started:
        yield started


def test_no_handler_starts_on_a_claim_the_replicas_did_not_confirm_and_each_slot_runs_once(
    topology: Replicated,
) -> None:
    """A job every second; one replica frozen for 2.5 s: no handler starts meanwhile, a live run
    is lost (unrenewed) instead of being renewed on the primary alone, and after the replica wakes
    the slots claimed meanwhile start, once each (at attempt 1, or as a backup's takeover of a
    lease that ran out meanwhile)."""
    url = topology.url(query=f"prefix=e{time.monotonic_ns()}&replicas=2&replica_wait_ms=100&socket_timeout=2")
    store = leasecron.open_store(url)
    cron = LeaseCron(store, runner="a", **{**FAST, "lease_ms": 600, "catch_up_ms": 0, "max_late_ms": 10_000})
    starts: List[Tuple[float, int, int, str]] = []
    events: Dict[str, List[Event]] = {"lost": [], "start": []}
    lock = threading.Lock()

    @cron.job(1, name="every-second")
    def work(ctx: Context) -> None:
        with lock:
            starts.append((time.monotonic(), ctx.slot_ms, ctx.attempt, ctx.reason))
        ctx.signal.wait(0.3)

    for name in events:
        cron.on(name, events[name].append)
    primary = topology.primary()
    replica = next(server for server in topology.servers if server is not primary and server.running)
    assert replica._process is not None
    cron.start()
    try:
        wait_for(lambda: len(starts) >= 2, timeout=10, message="two runs before the freeze")
        os.kill(replica._process.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        time.sleep(2.5)  # the freeze itself: what happens meanwhile is asserted below
        os.kill(replica._process.pid, signal.SIGCONT)
        woke = time.monotonic()
        wait_for(lambda: any(at > woke for at, *_ in starts), timeout=10, message="a run after the replica woke")
        time.sleep(1.5)
    finally:
        os.kill(replica._process.pid, signal.SIGCONT)
        cron.stop(timeout=2)
        store.close()
    assert [slot for at, slot, *_ in starts if frozen + 0.25 < at < woke] == [], "a handler ran on an unconfirmed claim"
    slots = [slot for _, slot, *_ in starts]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {slots}"
    # a claim is sent again with its token, never as a second attempt; a lease that ran out meanwhile
    # may be taken over by a backup as the next attempt, as always
    assert all(attempt == 1 or reason == "takeover" for _, _, attempt, reason in starts), starts
    assert {str(e.reason) for e in events["lost"]} <= {"unrenewed"}, [e.error for e in events["lost"]]
