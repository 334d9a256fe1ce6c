"""Rules 21 and 25 on Redis and Valkey: a batch of claims is one pipeline of claim.lua calls, a
batch of finishes one call of finish_many.lua (on a cluster, a pipeline of finish.lua per node).

``tests/stores/test_batch.py`` proves what a batch answers on every store; this file
proves what the Redis store sends for it: one round trip to the server (one per node of a
cluster), each claim its own ``EVALSHA``, the jobs set written in one ``SADD`` before and
one after, and a server that lost its scripts (``SCRIPT FLUSH``, a restart) answered by
loading the script once and sending again the claims it did not run; claims from an older
version of their jobs' schedules answered stale (rule 23) in the same round trip. Round trips are
counted by a redis-py connection that counts what it sends (a real client, on a real
server); commands by the server's own ``INFO commandstats``.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Counter, Dict, List

import pytest
import redis
import redis.cluster
import redis.connection

import leasecron
from leasecron import StoreError
from leasecron.stores import ClaimRequest, Finish
from leasecron.stores.redis import RedisStore, job_keys
from tests import servers
from tests.conftest import SERVERS, ClusterBackend
from tests.stores.test_redis import LONG, keys_under, recent_second

JOBS = 50


class CountingConnection(redis.connection.Connection):
    """A redis-py connection that counts its sends (each is one round trip) by server port."""

    sends: ClassVar[Counter[int]] = collections.Counter()

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends[self.port] += 1
        super().send_packed_command(command, check_health)


def commands(client: redis.Redis) -> Dict[str, Dict[str, int]]:
    """INFO commandstats by command name, since the last CONFIG RESETSTAT."""
    return {key[len("cmdstat_") :]: value for key, value in client.info("commandstats").items()}


def batch(names: List[str], slot: int, runner: str = "r") -> List[ClaimRequest]:
    return [ClaimRequest(name, slot, runner, lease_ms=LONG, overlap="allow") for name in names]


def test_a_batch_is_one_round_trip_of_one_evalsha_per_claim(own_server: servers.Server) -> None:
    """A batch of 50 new jobs: SADD (the 50 names, once), one pipeline of 50 EVALSHA, SADD of the
    jobs whose first run it stored: 3 round trips. The next slot's batch of the same jobs: one
    round trip of 50 EVALSHA. Every claim won, once."""
    store = RedisStore.from_url(own_server.url("valkey") + "?prefix=batch", connection_class=CountingConnection)
    control = own_server.client(socket_timeout=5)
    names = [f"job-{i}" for i in range(JOBS)]
    try:
        slot = recent_second(store)
        store.claim("warm", slot, runner="r")  # connects, loads claim.lua
        control.config_resetstat()
        CountingConnection.sends.clear()
        answers = store.claim_many(batch(names, slot))
        assert [a.outcome for a in answers] == ["won"] * JOBS
        stats = commands(control)
        assert stats["evalsha"]["calls"] == JOBS and stats["sadd"]["calls"] == 2, stats
        assert sum(CountingConnection.sends.values()) == 3
        assert store.jobs() == sorted(names + ["warm"])

        control.config_resetstat()
        CountingConnection.sends.clear()
        again = store.claim_many(batch(names, slot + 1_000))
        assert [a.outcome for a in again] == ["won"] * JOBS
        assert [a.run.slot_ms for a in again if a.run] == [slot + 1_000] * JOBS
        stats = commands(control)
        assert stats["evalsha"]["calls"] == JOBS and "sadd" not in stats, stats
        assert sum(CountingConnection.sends.values()) == 1
        for name in names:
            assert [(r.slot_ms, r.attempt, r.runner) for r in store.runs(name)] == [
                (slot + 1_000, 1, "r"), (slot, 1, "r"),
            ]  # fmt: skip
    finally:
        store.close()
        control.close()


def test_a_batch_after_script_flush_loads_the_script_once_and_runs_each_claim_once(
    own_server: servers.Server,
) -> None:
    """SCRIPT FLUSH, then a batch of 20: every EVALSHA of the pipeline answers NOSCRIPT (nothing
    ran), one SCRIPT LOAD, the 20 sent again: 20 runs, each with one attempt; a second batch,
    on a server that has the script, runs no claim twice (all running)."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=flush")
    control = own_server.client(socket_timeout=5)
    names = [f"job-{i}" for i in range(20)]
    try:
        slot = recent_second(store)
        store.claim("warm", slot, runner="r")
        control.script_flush()
        control.config_resetstat()
        answers = store.claim_many(batch(names, slot))
        stats = commands(control)
        assert stats["script|load"]["calls"] == 1, stats
        assert stats["evalsha"]["calls"] == 40 and stats["evalsha"]["failed_calls"] == 20, stats
        assert [a.outcome for a in answers] == ["won"] * 20
        for name, answer in zip(names, answers):
            assert answer.run is not None and store.get_run(name, slot) == answer.run
            assert [(a.number, a.runner) for a in answer.run.attempts] == [(1, "r")]
        assert [a.outcome for a in store.claim_many(batch(names, slot, runner="other"))] == ["running"] * 20
    finally:
        store.close()
        control.close()


def test_a_tampered_run_in_a_batch_is_a_store_error_naming_its_job(own_server: servers.Server) -> None:
    """A run whose stored JSON was tampered with fails the batch with a StoreError naming its job
    (as its single claim does); the batch's other claims were decided (rule 21: a batch that
    raises may have decided any of its claims) and answer again through their tokens."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=tamper")
    control = own_server.client(socket_timeout=5)
    try:
        slot = recent_second(store)
        assert store.claim("bad", slot, runner="r", lease_ms=LONG).won
        control.hset(job_keys("tamper", "bad")[0], str(slot), "{not json")
        requests = [ClaimRequest(name, slot, "me", lease_ms=LONG, token=f"tok-{name}") for name in ("a", "bad", "b")]
        with pytest.raises(StoreError, match="'bad'"):
            store.claim_many(requests)
        for request in (requests[0], requests[2]):
            answer = store.claim_many([request])[0]  # the same token: the retry of the claim that won
            assert answer.won and answer.run is not None and answer.run.token == request.token
            assert answer.run.attempt == 1
    finally:
        store.close()
        control.close()


def test_a_cluster_batch_is_one_round_trip_per_node(tmp_path: Path) -> None:
    """On the 3-master cluster, a batch of 60 jobs (on every master): each master gets one round
    trip holding an EVALSHA for each of its jobs' claims, and every claim is won once."""
    backend = ClusterBackend(tmp_path)
    cluster = SERVERS.cluster()
    nodes = [node.client(socket_timeout=5) for node in cluster.nodes]
    store = RedisStore.from_url(backend.url(), connection_class=CountingConnection)
    names = [f"job-{i}" for i in range(60)]
    try:
        slot = recent_second(store)
        store.claim_many(batch(names, slot - 1_000))  # registers the jobs, loads claim.lua on every node
        for node in nodes:
            node.config_resetstat()
        CountingConnection.sends.clear()
        answers = store.claim_many(batch(names, slot))
        assert [a.outcome for a in answers] == ["won"] * 60
        held = [keys_under(node, backend.namespace) for node in nodes]
        for node, client, node_keys in zip(cluster.nodes, nodes, held):
            mine = [name for name in names if job_keys(backend.namespace, name)[0] in node_keys]
            assert mine, "every master holds some of the 60 jobs"
            stats = commands(client)
            assert stats["evalsha"]["calls"] == len(mine), (node.port, stats)
            assert CountingConnection.sends[node.port] == 1, (node.port, CountingConnection.sends)
    finally:
        store.close()
        for client in nodes:
            client.close()
        backend.close()


def test_a_batch_answers_old_versions_stale_in_the_same_round_trip(own_server: servers.Server) -> None:
    """Rule 23 in a batch: 50 jobs, every other one's schedule changed; a batch of claims from
    version 0 is one round trip of 50 EVALSHA whose changed jobs answer stale (no key of their runs
    is written) and the others win; the changed jobs' claims from version 1 then win, in one round
    trip too."""
    store = RedisStore.from_url(own_server.url("valkey") + "?prefix=stale", connection_class=CountingConnection)
    control = own_server.client(socket_timeout=5)
    names = [f"job-{i}" for i in range(JOBS)]
    changed = names[::2]
    try:
        slot = recent_second(store)
        store.claim_many(batch(names, slot - 1_000))  # registers the jobs, loads claim.lua
        for name in changed:
            assert store.set_schedule(name, by="ops", schedule=60).version == 1
        control.config_resetstat()
        CountingConnection.sends.clear()
        answers = store.claim_many(batch(names, slot))
        assert [a.outcome for a in answers] == ["stale", "won"] * (JOBS // 2)
        assert commands(control)["evalsha"]["calls"] == JOBS and sum(CountingConnection.sends.values()) == 1
        assert all(store.get_run(name, slot) is None for name in changed)
        CountingConnection.sends.clear()
        again = [dataclasses.replace(request, version=1) for request in batch(changed, slot)]
        assert [a.outcome for a in store.claim_many(again)] == ["won"] * len(changed)
        assert sum(CountingConnection.sends.values()) == 1
    finally:
        store.close()
        control.close()


def test_a_batch_of_finishes_is_one_evalsha(own_server: servers.Server) -> None:
    """Rule 25: finish_many of 50 runs is one EVALSHA of finish_many.lua (one round trip); sent again
    (a lost answer), one round trip more, every finish answered false."""
    store = RedisStore.from_url(own_server.url("valkey") + "?prefix=finishes", connection_class=CountingConnection)
    control = own_server.client(socket_timeout=5)
    names = [f"job-{i}" for i in range(JOBS)]
    try:
        slot = recent_second(store)
        won = store.claim_many(batch(names, slot))
        store.finish_many([Finish("warm", slot, "no-token", "success")])  # loads finish_many.lua
        finishes = [Finish(name, slot, claim.run.token, "success") for name, claim in zip(names, won) if claim.run]
        control.config_resetstat()
        CountingConnection.sends.clear()
        assert store.finish_many(finishes) == [True] * JOBS
        stats = commands(control)
        assert stats["evalsha"]["calls"] == 1 and "sadd" not in stats and "evalsha_ro" not in stats, stats
        assert sum(CountingConnection.sends.values()) == 1
        assert {run.status for name in names for run in store.runs(name)} == {"success"}
        CountingConnection.sends.clear()
        assert store.finish_many(finishes) == [False] * JOBS
        assert sum(CountingConnection.sends.values()) == 1
    finally:
        store.close()
        control.close()


def test_a_cluster_batch_of_finishes_is_one_round_trip_per_node(tmp_path: Path) -> None:
    """Rule 25 on the 3-master cluster: finish_many of 60 runs sends each master one round trip
    holding an EVALSHA for each of its jobs' finishes; every run is finished once."""
    backend = ClusterBackend(tmp_path)
    nodes = [node.client(socket_timeout=5) for node in SERVERS.cluster().nodes]
    store = RedisStore.from_url(backend.url(), connection_class=CountingConnection)
    names = [f"job-{i}" for i in range(60)]
    try:
        slot = recent_second(store)
        won = store.claim_many(batch(names, slot))
        store.finish_many([Finish(name, slot - 1, "no-token", "success") for name in names])  # loads finish.lua
        CountingConnection.sends.clear()
        finishes = [Finish(name, slot, claim.run.token, "success") for name, claim in zip(names, won) if claim.run]
        assert store.finish_many(finishes) == [True] * 60
        assert sorted(CountingConnection.sends.values()) == [1, 1, 1], CountingConnection.sends
        assert all(store.get_run(name, slot).status == "success" for name in names)  # type: ignore[union-attr]
    finally:
        store.close()
        for client in nodes:
            client.close()
        backend.close()
