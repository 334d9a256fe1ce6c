"""Clients that cannot hang (issue 5, item 4): a store call through a stalled or blackholed
network gives up by its timeout, and a runner cut off from its store self-fences by its local
deadline whatever its blocked calls do, on every server store (Redis, Valkey, PostgreSQL).

Each test puts a :class:`chaoslib.proxy.FaultyProxy` between one store handle (or one
``LeaseCron`` instance) and the real server. A *blackhole* accepts bytes and never answers:
the kernel of the proxy acknowledges every byte, so TCP keepalives and ``tcp_user_timeout``
never fire; only the client's own deadline ends the wait. A *stall* holds the bytes back and
delivers them late.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

from chaoslib.proxy import FaultyProxy  # noqa: E402

import leasecron  # noqa: E402
from leasecron import Context, LeaseCron, StoreUnavailable  # noqa: E402
from tests.conftest import BACKENDS, SERVERS, Backend  # noqa: E402
from tests.helpers import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(90)

SERVER_BACKENDS = ["redis", "valkey", "postgresql"]
#: The per-call timeout the proxied stores are opened with, in seconds.
CALL_TIMEOUT_S = 1.0
#: Slack for thread scheduling and a connection's close on a loaded 2-core machine.
SLACK_S = 1.5


def _target(backend: Backend) -> Tuple[str, int]:
    if backend.kind == "postgresql":
        host, port, _ = SERVERS.postgres()
        return host, port
    return backend.nodes()[0]  # type: ignore[attr-defined, no-any-return]


def _timeout_option(backend: Backend, seconds: float) -> str:
    if backend.kind == "postgresql":
        return f"&timeout={seconds}&connect_timeout={seconds:g}"
    return f"&socket_timeout={seconds}&socket_connect_timeout={seconds}"


@pytest.fixture(params=SERVER_BACKENDS)
def proxied(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Tuple[Backend, FaultyProxy, Callable[..., str]]]:
    """A server backend, a proxy in front of its server, and ``url(timeout_s)`` through the proxy."""
    backend = BACKENDS[request.param](tmp_path)
    host, port = _target(backend)
    with FaultyProxy(host, port, name=f"proxy-{request.param}") as proxy:

        def url(timeout_s: float = CALL_TIMEOUT_S) -> str:
            direct = backend.url()
            assert f"{host}:{port}" in direct, direct
            return direct.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}", 1) + _timeout_option(backend, timeout_s)

        try:
            yield backend, proxy, url
        finally:
            proxy.unstall()
    backend.close()


@pytest.mark.parametrize("fault", ["blackhole", "stall"])
def test_a_store_call_gives_up_by_its_timeout(
    proxied: Tuple[Backend, FaultyProxy, Callable[..., str]], fault: str
) -> None:
    """Every operation on a connection that stops answering raises StoreUnavailable by the
    call's timeout, and the store works again once the network does."""
    backend, proxy, url = proxied
    store = leasecron.open_store(url())
    try:
        slot = store.now_ms() // 1000 * 1000  # the connection is open, the schema exists: the fault hits a live stream
        getattr(proxy, fault)()
        calls = [
            ("claim", lambda: store.claim("job", slot, runner="r")),
            ("heartbeat", lambda: store.heartbeat("job", slot, "t" * 8, 600)),
            ("finish", lambda: store.finish("job", slot, "t" * 8, "success")),
            ("release", lambda: store.release("job", slot, "t" * 8)),
            ("now_ms", store.now_ms),
        ]
        for name, call in calls:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                call()
            took = time.monotonic() - started
            assert took <= CALL_TIMEOUT_S + SLACK_S, f"{name} took {took:.2f} s under a {fault}"
        proxy.unstall()
        claim = wait_for(lambda: _try(lambda: store.claim("job", slot + 1_000, runner="r", overlap="allow")), 10)
        assert claim.outcome == "won"
    finally:
        store.close()


def test_the_postgres_default_timeout_bounds_a_blackholed_call(tmp_path: Path) -> None:
    """Without a timeout option a PostgreSQL call still ends: after the default 5 s (libpq alone
    would wait for ever on a peer whose kernel acknowledges every byte)."""
    backend = BACKENDS["postgresql"](tmp_path)
    host, port = _target(backend)
    with FaultyProxy(host, port, name="proxy-pg-default") as proxy:
        store = leasecron.open_store(backend.url().replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}", 1))
        try:
            store.now_ms()
            proxy.blackhole()
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="no answer within 5 s"):
                store.now_ms()
            assert 4.5 <= time.monotonic() - started <= 5 + SLACK_S
        finally:
            proxy.unstall()
            store.close()
    backend.close()


def _try(call: Callable[[], object]) -> object:
    try:
        return call()
    except StoreUnavailable:
        return None


def test_a_runner_cut_off_from_its_store_self_fences_and_comes_back(
    proxied: Tuple[Backend, FaultyProxy, Callable[..., str]]
) -> None:
    """Instance A reaches the store through the proxy, backup B directly. A blackhole while A
    runs a slot: A's handler is aborted as ``lost`` by its local deadline (last renew + lease),
    before B's takeover can start; B takes the slot over as attempt 2; after the network heals,
    A claims and runs slots of its other job again (none of its threads stayed stuck)."""
    backend, proxy, url = proxied
    lease_ms, heartbeat_ms = 600, 100
    options = dict(lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, jitter_ms=0, catch_up_ms=3_660_000)
    started = threading.Event()
    aborted: List[Tuple[str, float]] = []
    a_runs: List[Tuple[int, int]] = []
    b_starts: List[Tuple[int, int, float]] = []
    probes: List[float] = []
    # a timeout above the lease: a blocked heartbeat must not be what ends the run
    a = LeaseCron(leasecron.open_store(url(timeout_s=3.0)), runner="A", stop_timeout_ms=2_000)
    b = LeaseCron(backend.open(), runner="B", stop_timeout_ms=2_000)

    def on_a(ctx: Context) -> None:
        a_runs.append((ctx.slot_ms, ctx.attempt))
        started.set()
        if ctx.signal.wait(30):
            aborted.append((str(ctx.signal.reason), time.monotonic()))

    def on_b(ctx: Context) -> None:
        b_starts.append((ctx.slot_ms, ctx.attempt, time.monotonic()))
        ctx.signal.wait(30)

    a.add_job(on_a, 3600, name="job", **options)
    a.add_job(lambda: probes.append(time.monotonic()), 1, name="probe", **options)
    b.add_job(on_b, 3600, name="job", **options)
    try:
        a.start()
        assert started.wait(10), "A did not run the caught-up slot"
        slot = a_runs[0][0]
        time.sleep(3 * heartbeat_ms / 1000)  # a few heartbeats went through: A holds a renewed lease
        b.start()
        cut = time.monotonic()
        proxy.blackhole()
        wait_for(lambda: aborted, lease_ms / 1000 + SLACK_S + 1, message="A's handler was never aborted")
        reason, at = aborted[0]
        assert reason == "lost"
        # the local deadline counts from the last renew A *sent*, which was before the cut
        assert at - cut <= lease_ms / 1000 + SLACK_S, at - cut
        wait_for(lambda: b_starts, 10, message="B never took the slot over")
        assert (b_starts[0][0], b_starts[0][1]) == (slot, 2)
        # both times are taken by the handlers' threads after they woke: 20 ms for the wake-ups
        assert b_starts[0][2] >= at - 0.02, f"B started {at - b_starts[0][2]:.3f} s before A was aborted"
        healed = time.monotonic()
        proxy.unstall()
        wait_for(
            lambda: any(t > healed for t in probes), 10, message="A never ran its probe job after the network healed"
        )
    finally:
        proxy.unstall()
        b.stop()
        a.stop()
        a.store.close()
