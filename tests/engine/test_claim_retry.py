"""A claim whose answer was lost (issue 12, item 2): its retry wins the attempt the store recorded.

The store ran the claim, the reply never came back (a timeout), and the engine tries again. Each
try of one claim carries the same token, so the retry is told ``won`` with the attempt its first
try won, instead of ``running``: that attempt would otherwise be left to a backup, as a dead
runner's, and cost one of ``max_attempts``.

The end-to-end test puts a :class:`chaoslib.proxy.FaultyProxy` between one instance and a real
Redis, Valkey or PostgreSQL, and drops the server's replies (its requests still go through) from
the instance's first claim on, until a direct store handle shows the run the claim stored.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

from chaoslib.proxy import FaultyProxy  # noqa: E402

import leasecron  # noqa: E402
from leasecron.stored import Poll  # noqa: E402
from leasecron import Claim, LeaseCron, MemoryStore, Store  # noqa: E402
from leasecron.stores import ClaimRequest, DelegatingStore  # noqa: E402
from tests.conftest import BACKENDS, SERVERS, Backend  # noqa: E402
from tests.engine.support import CATCH_UP_HOUR, FAST, HOURLY, Seen, latest_hourly_slot  # noqa: E402
from tests.helpers import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(60)

JOB = "job"
#: How long the proxied store waits for an answer (s): a lost reply is a timeout this soon.
CALL_TIMEOUT_S = 0.3


class DropsRepliesFromFirstClaim(DelegatingStore):
    """The instance's store: switches the proxy to dropping the server's replies just before the
    first claim it passes on, and notes the reason and token of every claim (every try).

    The instance's polls for manual runs go to ``polls`` (the server directly): a poll in flight
    when the replies start being dropped would hold the proxied connection, and the claim would
    open a new one, whose handshake (redis-py's ``CLIENT SETINFO``) gets no reply: the claim
    would never be sent, and this test is about a claim that was."""

    def __init__(self, inner: Store, proxy: FaultyProxy, polls: Store) -> None:
        super().__init__(inner)
        self.proxy = proxy
        self.polls = polls
        self.tries: List[Tuple[str, Optional[str]]] = []
        self._lock = threading.Lock()

    def _claim(self, request: ClaimRequest) -> Claim:
        with self._lock:
            self.tries.append((request.reason, request.token))
            if len(self.tries) == 1:
                self.proxy.drop_replies()
        return super()._claim(request)

    def _poll(self, since: int) -> Poll:
        return self.polls.poll(since)


def _proxied_url(backend: Backend, proxy: FaultyProxy, host: str, port: int) -> str:
    """The backend's URL through the proxy, with a short call timeout."""
    direct = backend.url()
    assert f"{host}:{port}" in direct, direct
    url = direct.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}", 1)
    if backend.kind == "postgresql":  # libpq takes whole seconds for connect_timeout
        return f"{url}&timeout={CALL_TIMEOUT_S}&connect_timeout=1"
    return f"{url}&socket_timeout={CALL_TIMEOUT_S}&socket_connect_timeout={CALL_TIMEOUT_S}"


@pytest.fixture(params=["redis", "valkey", "postgresql"])
def proxied(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tuple[Backend, FaultyProxy, str]]:
    """A server backend, a proxy in front of its server, and the backend's URL through the proxy."""
    backend = BACKENDS[request.param](tmp_path)
    if backend.kind == "postgresql":
        host, port, _ = SERVERS.postgres()
    else:
        host, port = backend.nodes()[0]  # type: ignore[attr-defined]
    try:
        with FaultyProxy(host, port, name=f"proxy-{request.param}") as proxy:
            yield backend, proxy, _proxied_url(backend, proxy, host, port)
    finally:
        backend.close()


def test_a_claim_whose_reply_was_lost_is_won_by_its_retry(proxied: Tuple[Backend, FaultyProxy, str]) -> None:
    """Instance A's catch-up claim reaches the store, which stores attempt 1 for A, but the reply is
    dropped: A's call times out and A tries again, while the replies are still dropped and once the
    network is back. The retry, with the first try's token, is told won with that attempt: the
    run ends success at attempt 1 by A, with the first try's token, and A never becomes a backup
    of its own run (no takeover claim, no second attempt, no lost event)."""
    backend, proxy, url = proxied
    direct = backend.open()
    inner = leasecron.open_store(url)
    # A claim of slot 0 is late and stores nothing, but opens the connection (and the schema, and on
    # Redis registers the job): the dropped replies hit the claim itself, not a first call's set-up.
    assert inner.claim(JOB, 0, runner="A").outcome == "late"
    store = DropsRepliesFromFirstClaim(inner, proxy, direct)
    cron = LeaseCron(store, runner="A", catch_up_ms=CATCH_UP_HOUR, stop_timeout_ms=2_000, **FAST)
    seen = Seen(cron)
    cron.add_job(lambda: None, HOURLY, name=JOB)
    slot = latest_hourly_slot(direct)
    try:
        cron.start()
        stored = wait_for(lambda: direct.get_run(JOB, slot), 10, message="the first claim never reached the store")
        assert stored is not None and proxy.dropping_replies
        assert (stored.attempt, stored.runner) == (1, "A")
        proxy.restore()
        seen.wait("success", 10, job=JOB)
    finally:
        proxy.restore()
        cron.stop()
        inner.close()
    run = direct.get_run(JOB, slot)
    assert run is not None
    assert (run.status, run.attempt, run.runner, run.handed_over) == ("success", 1, "A", False), run
    assert seen.types(JOB) == ["start", "success"]
    assert [e.attempt for e in seen.of("start")] == [1]
    assert len(store.tries) >= 2, "the claim was not retried"
    assert store.tries == [("catch-up", stored.token)] * len(store.tries)  # every try: the first's token
    assert run.token == stored.token


def _delegating(inner: Store, tmp_path: Path) -> Store:
    return DelegatingStore(inner)


def _prometheus(inner: Store, tmp_path: Path) -> Store:
    from prometheus_client import CollectorRegistry

    from leasecron.contrib.prometheus import instrument

    cron = LeaseCron(inner, runner="a")
    instrument(cron, registry=CollectorRegistry())
    return cron.store


def _chaos_worker(inner: Store, tmp_path: Path) -> Store:
    from chaoslib.worker import Recorder, RecordingStore

    return RecordingStore(inner, Recorder(tmp_path / "worker.jsonl", "a"))


def _fire_lag(inner: Store, tmp_path: Path) -> Store:
    from fire_lag import CountingStore

    return CountingStore(inner)


WRAPPERS: List[Callable[[Store, Path], Store]] = [_delegating, _prometheus, _chaos_worker, _fire_lag]


@pytest.mark.parametrize("wrap", WRAPPERS, ids=lambda w: w.__name__.strip("_"))
def test_every_store_wrapper_passes_the_claims_token_on(wrap: Callable[[Store, Path], Any], tmp_path: Path) -> None:
    """The stores that wrap another (DelegatingStore, the Prometheus metrics, the chaos worker's
    and the fire-lag benchmark's recorders) pass a claim's token on: the engine's retry of a claim
    that won is told won through them too."""
    store = wrap(MemoryStore(), tmp_path)
    slot = store.now_ms() - 1_000
    first = store.claim(JOB, slot, runner="a", token="the-claims-token")
    again = store.claim(JOB, slot, runner="a", token="the-claims-token")
    assert first.outcome == again.outcome == "won"
    assert first.run is not None and again.run is not None
    assert (again.run.attempt, again.run.token) == (1, "the-claims-token") == (first.run.attempt, first.run.token)


@pytest.mark.parametrize("wrap", WRAPPERS, ids=lambda w: w.__name__.strip("_"))
def test_every_store_wrapper_overrides_protected_methods_only(
    wrap: Callable[[Store, Path], Any], tmp_path: Path
) -> None:
    """The stores that wrap another leave the public operations to Store, which checks the arguments
    once, and override the protected methods (``_claim`` and the like) they observe."""
    store = wrap(MemoryStore(), tmp_path)
    for name in ("claim", "heartbeat", "finish", "release", "get_run", "unfinished", "runs", "jobs"):
        assert getattr(type(store), name) is getattr(Store, name), f"{type(store).__name__}.{name}"
    assert type(store)._claim is not Store._claim
