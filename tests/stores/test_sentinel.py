"""A store found through Sentinel, on real replicated servers the tests start (tests/replicated.py):
a primary, two replicas and three Sentinels, of Redis and of Valkey.

``redis+sentinel://`` and ``valkey+sentinel://`` URLs open the primary the Sentinels name, with the
data servers' password in the URL and the Sentinels' in ``sentinel_password``; the store follows a
failover and loads its scripts on the new primary; with ``replicas=2`` a write is answered only
once both replicas hold it (rule 22), so what it answered survives the failover; ``leasecron
check`` names the primary and each replica.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

import leasecron
from leasecron import ConfigError, StoreUnavailable
from leasecron.cli.commands import check_output
from leasecron.stores import Store
from tests.conftest import required_binary
from tests.replicated import Replicated

KINDS = ["redis", "valkey"]
SENTINEL_PASSWORD = "sentinel-s3cret"
#: A window in which no slot of these tests is late.
LATE = 2**49
T = TypeVar("T")

pytestmark = pytest.mark.timeout(120)


def _topology(kind: str, directory: Path) -> Replicated:
    return Replicated(required_binary(kind), directory, sentinel_password=SENTINEL_PASSWORD)


@pytest.fixture(scope="module", params=KINDS)
def topology(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    """One replicated topology per kind, shared by the tests that cause no failover."""
    with _topology(request.param, tmp_path_factory.mktemp(f"{request.param}-sentinel")) as started:
        yield started


def _open(topology: Replicated, query: str = "") -> Store:
    scheme = "valkey+sentinel" if "valkey" in topology.binary else "redis+sentinel"
    options = f"sentinel_password={SENTINEL_PASSWORD}&prefix=t{time.monotonic_ns()}" + (f"&{query}" if query else "")
    return leasecron.open_store(topology.url(scheme, options))


def _until(call: Callable[[], T], timeout: float = 30.0) -> "tuple[T, float]":
    """``call()`` again until it does not raise StoreUnavailable: its answer and the seconds it took."""
    start = time.monotonic()
    while True:
        try:
            return call(), time.monotonic() - start
        except StoreUnavailable:
            if time.monotonic() - start > timeout:
                raise
            time.sleep(0.05)


def test_a_sentinel_url_opens_the_primary_the_sentinels_name(topology: Replicated) -> None:
    """The store writes to the primary (its replicas then hold the run), says its kind, and shows no password."""
    store = _open(topology)
    try:
        assert store.kind == ("valkey" if "valkey" in topology.binary else "redis")
        assert SENTINEL_PASSWORD not in repr(store) and "sentinel_password=***" in repr(store)
        claim = store.claim("job", 1_000, runner="a", max_late_ms=LATE)
        assert claim.won
        with topology.primary().client() as client:
            assert client.exists(f"{store.prefix}:{{job}}:runs") or client.dbsize() > 0
    finally:
        store.close()


def test_leasecron_check_names_the_primary_and_each_replica_and_whether_replicas_n_is_met(
    topology: Replicated,
) -> None:
    """check shows the service's primary, each replica with how far behind it is, and warns that
    replicas=0 can lose acknowledged claims in a failover, or that replicas=3 cannot be met."""
    for query, warned in [("", "waits for no replica"), ("replicas=2", None), ("replicas=3", "cannot be met now")]:
        store = _open(topology, query)
        try:
            lines = check_output(store)
        finally:
            store.close()
        primary = topology.primary()
        assert f"replication   Sentinel service 'leasecron': primary 127.0.0.1:{primary.port}" in lines
        replicas = [line for line in lines if line.startswith("replication   replica 127.0.0.1:")]
        assert len(replicas) == 2 and all(" online, " in line for line in replicas), lines
        warnings = [line for line in lines if line.startswith("WARNING") and "replica" in line]
        assert (warned is None and warnings == []) or (warned is not None and warned in warnings[0]), lines


def test_rule_22_a_claim_is_answered_only_once_both_replicas_hold_it(topology: Replicated) -> None:
    """With replicas=2 and one replica frozen, a claim that won raises and is not answered; a
    claim answered running is still answered; once the replica wakes, the claim's retry with its
    token wins that same attempt."""
    store = _open(topology, "replicas=2&replica_wait_ms=100")
    primary = topology.primary()
    frozen = next(server for server in topology.servers if server is not primary and server.running)
    assert frozen._process is not None
    try:
        store.claim("busy", 1_000, runner="other", max_late_ms=LATE)
        os.kill(frozen._process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailable, match="reached 1 of the 2 replicas"):
                store.claim("job", 1_000, runner="a", token="tok", max_late_ms=LATE)
            assert store.claim("busy", 1_000, runner="a", max_late_ms=LATE).outcome == "running"
        finally:
            os.kill(frozen._process.pid, signal.SIGCONT)
        again, _ = _until(lambda: store.claim("job", 1_000, runner="a", token="tok", max_late_ms=LATE))
        assert again.won and again.run is not None and (again.run.attempt, again.run.token) == (1, "tok")
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_store_follows_a_failover_and_what_it_answered_survives(kind: str, tmp_path: Path) -> None:
    """kill -9 of the primary: calls fail (StoreUnavailable) until the Sentinels promote a replica,
    then reach it; it holds every run the store answered with replicas=2. With one replica left a
    write cannot be confirmed by two and is refused (safety before availability), its retry with
    the same token wins once the old primary is back as a replica; the new primary runs the store's
    scripts (loaded anew)."""
    with _topology(kind, tmp_path) as topology:
        store = _open(topology, "replicas=2&socket_timeout=1")
        try:
            won = store.claim("job", 1_000, runner="a", max_late_ms=LATE, lease_ms=60_000)
            assert won.won and won.run is not None
            old = topology.kill_primary()
            kept, took = _until(lambda: store.get_run("job", 1_000))
            assert kept is not None and (kept.token, kept.status) == (won.run.token, "running") and took < 15, took
            assert topology.primary() is not old
            with pytest.raises(StoreUnavailable, match="reached 1 of the 2 replicas"):
                store.claim("job", 2_000, runner="b", token="tb", max_late_ms=LATE, overlap="allow")
            topology.rejoin(old)
            topology.wait_settled(time.monotonic() + 30)
            claim_b = {"runner": "b", "token": "tb", "max_late_ms": LATE, "overlap": "allow"}
            again, _ = _until(lambda: store.claim("job", 2_000, **claim_b))  # type: ignore[arg-type]
            assert again.won and again.run is not None and (again.run.attempt, again.run.token) == (1, "tb")
            assert store.heartbeat("job", 1_000, won.run.token, 60_000)
        finally:
            store.close()


def test_a_forked_child_uses_the_store_on_connections_of_its_own(topology: Replicated) -> None:
    """After os.fork() (gunicorn's workers), the child's calls work: its pool starts afresh."""
    store = _open(topology)
    try:
        assert store.claim("job", 1_000, runner="parent", max_late_ms=LATE).won
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if its claim is answered from the primary
            try:
                claim = store.claim("job", 2_000, runner="child", max_late_ms=LATE, overlap="allow")
                os._exit(0 if claim.won else 1)
            except BaseException:  # noqa: BLE001 - the exit code says it
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert store.claim("job", 3_000, runner="parent", max_late_ms=LATE, overlap="allow").won
    finally:
        store.close()


@pytest.mark.parametrize(
    "url, wrong",
    [
        ("redis+sentinel://127.0.0.1:26379", "names the service"),
        ("redis+sentinel://127.0.0.1:26379/svc/zero", "names the service"),
        ("redis+sentinel://127.0.0.1:26379/svc/0/1", "names the service"),
        ("redis+sentinel://127.0.0.1:notaport/svc", "host:port"),
        ("redis+sentinel://127.0.0.1:26379/svc?cluster=true", "unknown option 'cluster'"),
        ("redis+sentinel://127.0.0.1:26379/svc?replicas=x", "replicas"),
    ],
)
def test_bad_sentinel_urls_are_config_errors_saying_what_is_wrong(url: str, wrong: str) -> None:
    """A Sentinel URL names its Sentinels (host:port), the service and at most a database number;
    a cluster cannot be reached through Sentinel."""
    with pytest.raises(ConfigError, match=wrong):
        leasecron.open_store(url)


def test_sentinels_that_do_not_answer_make_calls_unavailable_not_config_errors() -> None:
    """No Sentinel answers: the store opens (nothing is asked yet), and each call raises
    StoreUnavailable, which the engine retries."""
    store = leasecron.open_store("redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc?socket_timeout=0.2")
    try:
        with pytest.raises(StoreUnavailable):
            store.now_ms()
    finally:
        store.close()
