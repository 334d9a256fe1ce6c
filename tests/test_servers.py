"""Tests of the real-server management in :mod:`tests.servers`.

A missing server binary skips these tests on a developer machine and fails
them in CI (``CI=true``), like an unreachable backend in ``conftest.py``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import List

import pytest
import redis

from tests.ci import skip_or_fail
from tests.servers import Cluster, Server, free_port, reachable, server_binary


def require_binary(*kinds: str) -> str:
    """The first server binary found among ``kinds``; skip (fail in CI) when there is none."""
    for kind in kinds:
        binary = server_binary(kind)
        if binary:
            return binary
    skip_or_fail(f"no server binary found for {' or '.join(kinds)}")


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    assert not reachable("127.0.0.1", port)


def test_valkey_server_starts_answers_and_stops(tmp_path: Path) -> None:
    server = Server(require_binary("valkey"), tmp_path)
    with server:
        assert server.running
        assert reachable(server.host, server.port)
        assert server.url() == f"redis://127.0.0.1:{server.port}/0"
        assert server.url("valkey") == f"valkey://127.0.0.1:{server.port}/0"
        info = server.info()
        # Valkey reports what it is in server_name and its own version in
        # valkey_version; redis_version stays at a Redis-compatible "7.2.4".
        assert info["server_name"] == "valkey"
        assert info["valkey_version"]
        assert info["tcp_port"] == server.port
        assert info["executable"].endswith("valkey-server")
        with server.client() as client:
            assert client.ping()
    assert not server.running
    assert not reachable(server.host, server.port)


def test_appendonly_server_keeps_writes_across_a_crash(tmp_path: Path) -> None:
    with Server(require_binary("valkey", "redis"), tmp_path, appendonly=True) as server:
        port = server.port
        with server.client() as client:
            client.set("survivor", "still here")
        server.kill()
        assert not server.running
        assert not reachable(server.host, port)
        server.restart()
        assert server.port == port
        with server.client() as client:
            assert client.get("survivor") == b"still here"


def test_start_fails_clearly_when_the_port_is_taken(tmp_path: Path) -> None:
    binary = require_binary("valkey", "redis")
    with Server(binary, tmp_path / "first") as first:
        second = Server(binary, tmp_path / "second", port=first.port)
        with pytest.raises(RuntimeError, match="did not start within") as excinfo:
            second.start(timeout=1.0)
        assert "Address already in use" in str(excinfo.value)
        assert not second.running
        assert reachable(first.host, first.port)


def keys_per_node(client: redis.cluster.RedisCluster, cluster: Cluster) -> List[str]:
    """One key whose hash slot lies in each node's range, in node order."""
    keys: List[str] = []
    for first, last in cluster.slot_ranges:
        keys.append(next(k for k in (f"key{n}" for n in itertools.count()) if first <= client.keyslot(k) <= last))
    return keys


def test_cluster_of_three_masters_serves_keys_on_every_node(tmp_path: Path) -> None:
    with Cluster(require_binary("redis", "valkey"), tmp_path, masters=3) as cluster:
        assert cluster.url() == f"redis://127.0.0.1:{cluster.nodes[0].port}"
        assert cluster.startup_nodes == [("127.0.0.1", node.port) for node in cluster.nodes]
        client = cluster.client()
        try:
            assert len(client.get_primaries()) == 3
            keys = keys_per_node(client, cluster)
            for key in keys:
                assert client.set(key, f"value of {key}")
            for key in keys:
                assert client.get(key) == f"value of {key}".encode()
        finally:
            client.close()
        for node, key in zip(cluster.nodes, keys):
            with node.client() as direct:
                assert direct.dbsize() == 1
                assert direct.get(key) == f"value of {key}".encode()
    assert not any(node.running for node in cluster.nodes)
