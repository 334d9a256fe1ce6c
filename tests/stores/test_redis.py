"""What only the Redis/Valkey store has: its URLs, a user's own client, its keys, one round
trip per operation, exact big integers in Lua, the server's name, a real cluster, the
error texts its Lua builds itself, and the keys, changelog and round trips of stored schedules
(with a keyspace of 0.2 taking them).

The store contract itself is proved for every backend by ``tests/stores/test_contract.py``;
nothing here repeats a rule of it. Every test runs on a real server: the session servers of
``tests.conftest.SERVERS`` (the system Redis, a Valkey, a 3-master cluster), or a server of
its own in ``tmp_path`` where the test needs a server nobody else talks to.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import pytest
import redis
import redis.cluster
import redis.connection

import leasecron
from leasecron.announcements import Announcement
from leasecron import ConfigError, Run, Store, StoreError, StoreUnavailable
from leasecron.controls import JobState
from leasecron.runs import Attempt, slot_datetime
from leasecron.stored import Poll, ScheduleChanges
from leasecron.stores.redis import RedisStore, changelog_keys, control_keys, job_keys, schedule_key
from leasecron.stores.redis_replies import index_member, schedule_args
from leasecron.stores.redis_scripts import load_scripts
from tests import servers
from tests.conftest import BACKENDS, SERVERS, Backend, ClusterBackend, RedisBackend, ValkeyBackend, required_binary
from tests.helpers import wait_for

LONG = 30_000  # a lease that stays alive for the whole test
SHORT = 300  # a lease the test lets run out
ANY_AGE = 2**50  # max_late_ms under which no slot since the epoch is late


# -- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture(params=["redis", "valkey"])
def redis_like(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The system Redis and the session Valkey, each with a key prefix of this test's own."""
    backend = {"redis": RedisBackend, "valkey": ValkeyBackend}[request.param](tmp_path)
    try:
        backend.nodes()  # the server is there (or unavailable() said so)
        yield backend
    finally:
        backend.close()


@pytest.fixture
def redis_backend(tmp_path: Path) -> Iterator[Backend]:
    """The system Redis (on 127.0.0.1:6379, or one started for the session) with a prefix of its own."""
    backend = RedisBackend(tmp_path)
    try:
        yield backend
    finally:
        backend.close()


def node_client(backend: Backend) -> redis.Redis:
    host, port = backend.nodes()[0]
    return redis.Redis(host=host, port=port, socket_timeout=5)


def keys_under(client: redis.Redis, prefix: str) -> Set[str]:
    """Every key of the server under ``prefix:`` (SCAN MATCH, as text)."""
    return {k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(match=f"{prefix}:*", count=1000)}


def hash_tag(key: str) -> Optional[str]:
    """The hash tag of ``key`` by the Redis Cluster rule (the text between the first ``{``
    and the first ``}`` after it, if not empty), or None when the whole key is hashed."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end < 0 or end == start + 1:
        return None
    return key[start + 1 : end]


def recent_second(store: Store, ago_s: int = 5) -> int:
    """A slot on a whole second, ``ago_s`` seconds before the store's now."""
    now = store.now_ms()
    return now - now % 1000 - ago_s * 1000


def expire_all(store: Store, runs: List[Run]) -> None:
    """Wait until the store's clock has passed the lease end of every run."""
    end = max(r.lease_end_ms for r in runs)
    wait_for(lambda: store.now_ms() > end, timeout=10, interval=0.005)


def utc_ms(*args: int, ms: int = 0) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp()) * 1000 + ms


# -- 1. URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["redis", "valkey"])
def test_url_opens_a_redis_store_under_its_prefix(scheme: str, tmp_path: Path) -> None:
    """redis:// (the system Redis) and valkey:// (the Valkey server) open a RedisStore whose
    keys all live under the URL's ?prefix=."""
    backend = (RedisBackend if scheme == "redis" else ValkeyBackend)(tmp_path)
    host, port = backend.nodes()[0]
    prefix = backend.namespace
    store = leasecron.open_store(f"{scheme}://{host}:{port}/0?prefix={prefix}")
    client = node_client(backend)
    try:
        assert type(store) is RedisStore
        assert store.prefix == prefix
        slot = recent_second(store)
        won = store.claim("job", slot, runner="r", lease_ms=LONG)
        assert won.outcome == "won"
        assert store.get_run("job", slot) == won.run
        runs, slots, running, _ = job_keys(prefix, "job")
        assert keys_under(client, prefix) == {runs, slots, running, f"{prefix}:jobs"}
    finally:
        store.close()
        client.close()
        backend.close()


@pytest.mark.parametrize("scheme", ["rediss", "valkeys"])
def test_tls_schemes_make_a_tls_client(scheme: str) -> None:
    """rediss:// and valkeys:// give a client whose connections are TLS (SSLConnection); nothing is connected."""
    store = leasecron.open_store(f"{scheme}://127.0.0.1:{servers.free_port()}/0?prefix=tls")
    try:
        assert type(store) is RedisStore
        pool = store.client.connection_pool
        assert issubclass(pool.connection_class, redis.connection.SSLConnection)
    finally:
        store.close()


@pytest.mark.parametrize("scheme", ["redis", "valkey"])
def test_plain_schemes_make_a_plain_client(scheme: str) -> None:
    """redis:// and valkey:// connections are not TLS (the TLS test above can fail)."""
    store = leasecron.open_store(f"{scheme}://127.0.0.1:{servers.free_port()}/0")
    try:
        assert not issubclass(store.client.connection_pool.connection_class, redis.connection.SSLConnection)
    finally:
        store.close()


@pytest.mark.parametrize("scheme", ["redis", "rediss", "valkey", "valkeys"])
def test_url_credentials_reach_the_client_and_the_password_stays_out_of_repr(scheme: str) -> None:
    """user:password in the URL reach the client's connection options; repr(store) never shows the password."""
    store = leasecron.open_store(f"{scheme}://alice:s3cr%40tXyz@127.0.0.1:{servers.free_port()}/3?prefix=creds")
    try:
        kwargs = store.client.connection_pool.connection_kwargs
        assert kwargs["username"] == "alice"
        assert kwargs["password"] == "s3cr@tXyz"
        assert kwargs["db"] == 3
        text = repr(store)
        assert "s3cr" not in text and "tXyz" not in text
        assert "alice" in text and "creds" in text
    finally:
        store.close()


def test_url_options_reach_the_client(redis_backend: Backend) -> None:
    """Query options redis-py knows (socket_timeout) reach the client; the store's own timeouts
    are set by default so no call can hang."""
    host, port = redis_backend.nodes()[0]
    store = leasecron.open_store(f"redis://{host}:{port}/0?prefix={redis_backend.namespace}&socket_timeout=0.25")
    default = leasecron.open_store(f"redis://{host}:{port}/0?prefix={redis_backend.namespace}")
    try:
        assert store.client.connection_pool.connection_kwargs["socket_timeout"] == 0.25
        kwargs = default.client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] and kwargs["socket_timeout"] > 0
        assert kwargs["socket_connect_timeout"] and kwargs["socket_connect_timeout"] > 0
        assert store.now_ms() > 0
    finally:
        store.close()
        default.close()


@pytest.mark.parametrize(
    "url, named",
    [
        ("redis://127.0.0.1:6379/0?cluster=maybe", "cluster"),
        ("redis://127.0.0.1:6379/0?cluster=", "cluster"),
        ("redis://127.0.0.1:6379/0?prefix=", "prefix"),
        ("redis://127.0.0.1:6379/0?prefix=a{b", "prefix"),
        ("redis://127.0.0.1:6379/0?prefix=ab}", "prefix"),
        ("valkey://127.0.0.1:6379/0?prefix={x}", "prefix"),
    ],
)
def test_bad_url_options_raise_config_error_naming_them(url: str, named: str) -> None:
    """A bad cluster= value, an empty prefix or a prefix with a brace raise ConfigError naming the option."""
    with pytest.raises(ConfigError) as info:
        leasecron.open_store(url)
    assert named in str(info.value)


@pytest.mark.parametrize("prefix", ["", "a{b", "a}b", None, 5])
def test_bad_prefix_given_to_the_class_raises_config_error(prefix: Any) -> None:
    """RedisStore(client, prefix=...) refuses an empty, braced or non-text prefix with ConfigError naming it."""
    client = redis.Redis(host="127.0.0.1", port=servers.free_port())
    try:
        with pytest.raises(ConfigError) as info:
            RedisStore(client, prefix=prefix)
        assert "prefix" in str(info.value)
    finally:
        client.close()


@pytest.mark.parametrize("thing", [None, object(), "redis://127.0.0.1:6379/0", 42])
def test_an_object_that_is_not_a_client_raises_config_error(thing: Any) -> None:
    """RedisStore(client=...) with something that is not a redis-py client raises ConfigError naming the client."""
    with pytest.raises(ConfigError) as info:
        RedisStore(client=thing)
    assert "client" in str(info.value)


def test_unreachable_server_raises_store_unavailable_on_the_first_operation() -> None:
    """Opening a URL nobody listens on does not connect; the first operation raises
    StoreUnavailable at once (a connect timeout is set: no hang)."""
    store = leasecron.open_store(f"redis://127.0.0.1:{servers.free_port()}/0?prefix=gone")
    try:
        assert store.client.connection_pool.connection_kwargs["socket_connect_timeout"] > 0
        for operation in (
            store.now_ms,
            lambda: store.claim("job", 1_000, runner="r"),
            lambda: store.heartbeat("job", 1_000, "t", 1_000),
            lambda: store.get_run("job", 1_000),
            store.jobs,
        ):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                operation()
            assert time.monotonic() - started < 5
    finally:
        store.close()


# -- 2. a user's own client ---------------------------------------------------------------------


@pytest.mark.parametrize("decode_responses", [False, True])
def test_a_users_client_works_and_close_leaves_it_open(redis_like: Backend, decode_responses: bool) -> None:
    """RedisStore(client=...) works on a user's redis.Redis (bytes or str replies), and
    store.close() does not close that client: its connection stays the same and answers PING."""
    host, port = redis_like.nodes()[0]
    client = redis.Redis(host=host, port=port, decode_responses=decode_responses, socket_timeout=5)
    try:
        store = RedisStore(client=client, prefix=redis_like.namespace)
        assert store.client is client
        slot = recent_second(store)
        won = store.claim("job", slot, runner="r", lease_ms=LONG)
        assert won.outcome == "won" and won.run is not None
        run = won.run
        assert isinstance(run.token, str) and isinstance(run.runner, str)
        assert store.claim("job", slot, runner="other").outcome == "running"
        assert store.heartbeat("job", slot, run.token, LONG)
        assert store.unfinished("job") == [store.get_run("job", slot)]
        assert store.finish("job", slot, run.token, "failed", error="boom ✓")
        done = store.get_run("job", slot)
        assert done is not None and (done.status, done.error, done.token) == ("failed", "boom ✓", run.token)
        assert store.runs("job") == [done]
        assert store.jobs() == ["job"]
        assert store.server_version().split()[0] in ("Redis", "Valkey")
        paused = store.pause("job", by="ops ✓", note="why ✓")
        made = store.request_run("job", by="ops ✓")
        assert store.job_states() == [store.job_state("job")] == [
            JobState("job", True, "ops ✓", paused.paused_ms, "why ✓", (made,))
        ]
        assert store.pending_requests() == [made]
        manual = store.claim("job", made.slot_ms, runner="r", reason="manual", overlap="allow").run
        assert manual is not None and [a.outcome for a in manual.attempts] == ["running"]
        assert store.pending_requests() == [dataclasses.replace(made, state="claimed")]
        record = store.set_schedule("job", by="ops ✓", schedule=30, task="t ✓", kwargs={"n": 2**60, "s": "✓"})
        assert store.stored_schedule("job") == record and record.updated_by == "ops ✓"
        assert store.poll(0) == Poll([dataclasses.replace(made, state="claimed")], ScheduleChanges(1, (record,)))

        connection_id = client.client_id()
        store.close()
        assert client.ping()
        assert client.client_id() == connection_id, "store.close() closed the user's client"
    finally:
        client.close()


def test_a_store_from_a_url_closes_its_own_client(redis_backend: Backend) -> None:
    """A store opened from a URL owns its client and closes it (the difference the test above relies on)."""
    store = leasecron.open_store(redis_backend.url())
    store.now_ms()
    connection_id = store.client.client_id()
    store.close()
    try:
        assert store.client.client_id() != connection_id
    finally:
        store.client.close()


# -- 3. keys ----------------------------------------------------------------------------------------

#: Job names that a careless key encoding would break or merge, in pairs that must stay apart.
TRICKY_NAMES = [
    "a:b", "a%3Ab", "a%3ab",
    "x}", "x%7D", "x%7d",
    "{x}", "%7Bx%7D", "x{", "{", "}", "{}", "}{", "a{b}c",
    "%", "%25", "%%",
    "a b", "a%20b", "a+b",
    "é", "%C3%A9", "e\u0301", "🕐",
    "a*", "a?", "[a]", "a\\b", "a/b", "a.b", "a_b", "a-b",
]  # fmt: skip


def test_tricky_job_names_are_kept_apart_and_each_job_has_one_hash_tag(redis_like: Backend) -> None:
    """Job names with braces, colons, %, spaces and unicode (and names a naive encoding would
    merge) get keys of their own: each job's four keys share one hash tag and cluster slot,
    no two jobs share a tag, and acting on one job never touches another."""
    assert len(set(TRICKY_NAMES)) == len(TRICKY_NAMES)
    store = redis_like.open()
    prefix = redis_like.namespace
    tags: Dict[str, str] = {}
    for name in TRICKY_NAMES:
        keys = job_keys(prefix, name)
        assert len(set(keys)) == 4
        assert all(k.startswith(prefix + ":") for k in keys)
        job_tags = {hash_tag(k) for k in keys}
        assert len(job_tags) == 1 and None not in job_tags, (name, keys)
        assert len({redis.cluster.key_slot(k.encode()) for k in keys}) == 1, (name, keys)
        tags[name] = job_tags.pop()  # type: ignore[assignment]
    assert len(set(tags.values())) == len(TRICKY_NAMES), "two job names share a hash tag"

    slot = recent_second(store)
    won = {name: store.claim(name, slot, runner="r", lease_ms=LONG).run for name in TRICKY_NAMES}
    assert all(run is not None for run in won.values())
    # finish every other name; the rest keeps running: no finish leaks into a neighbour
    ended = TRICKY_NAMES[::2]
    for name in ended:
        assert store.finish(name, slot, won[name].token, "success")  # type: ignore[union-attr]
    for name in TRICKY_NAMES:
        run = store.get_run(name, slot)
        assert run is not None and run.job == name and run.token == won[name].token  # type: ignore[union-attr]
        assert run.status == ("success" if name in ended else "running"), name
        assert store.runs(name) == [run]
    assert store.jobs() == sorted(TRICKY_NAMES)

    client = node_client(redis_like)
    try:
        expected = {f"{prefix}:jobs"}
        for name in TRICKY_NAMES:
            runs, slots, running, finished = job_keys(prefix, name)
            expected |= {runs, slots, finished if name in ended else running}
        assert keys_under(client, prefix) == expected
    finally:
        client.close()


def test_the_keys_of_a_job_are_exactly_the_documented_ones(redis_like: Backend) -> None:
    """A claim creates the job's runs, slots and running keys and <prefix>:jobs, and nothing
    else; a finish moves the slot to the finished key. SCAN MATCH <prefix>:* on a fresh prefix."""
    store = redis_like.open()
    prefix = redis_like.namespace
    client = node_client(redis_like)
    try:
        assert keys_under(client, prefix) == set()
        runs, slots, running, finished = job_keys(prefix, "job")
        slot = recent_second(store)
        run = store.claim("job", slot, runner="r", lease_ms=LONG).run
        assert run is not None
        assert keys_under(client, prefix) == {runs, slots, running, f"{prefix}:jobs"}
        assert client.type(runs) == b"hash" and client.type(slots) == b"zset" and client.type(running) == b"zset"
        assert client.type(f"{prefix}:jobs") == b"set"
        assert store.finish("job", slot, run.token, "success")
        assert keys_under(client, prefix) == {runs, slots, finished, f"{prefix}:jobs"}
        nxt = store.claim("job", slot + 1_000, runner="r", lease_ms=LONG)
        assert nxt.outcome == "won"
        assert keys_under(client, prefix) == {runs, slots, running, finished, f"{prefix}:jobs"}
        # nothing is pickled: each stored run is JSON text
        for raw in client.hvals(runs):
            assert raw.startswith(b"{") and raw.endswith(b"}")
    finally:
        client.close()


# -- 4. one round trip per operation ------------------------------------------------------------------

#: The commands the Lua scripts themselves send (counted by the server, but not round trips).
SCRIPT_COMMANDS = {"time", "exists", "hget", "hset", "hdel", "zadd", "zrem", "zrange", "zrevrange", "zrevrangebyscore"}
#: The commands this test sends itself.
OWN_COMMANDS = {"config|resetstat", "info", "echo", "monitor"}


def client_commands(monitor: Any, marker: str, ignore_port: str) -> List[str]:
    """The commands MONITOR saw from clients (not from scripts, not from the client on
    ``ignore_port``), up to the ECHO of ``marker``."""
    seen = []
    while True:
        entry = monitor.next_command()
        command = entry["command"]
        if command == f"ECHO {marker}":
            return seen
        if entry["client_type"] != "lua" and str(entry["client_port"]) != ignore_port:
            seen.append(command)


def test_each_operation_is_one_evalsha(own_server: servers.Server) -> None:
    """Claim (of a registered job), heartbeat, finish and release are one EVALSHA round trip each:
    INFO commandstats counts exactly 4 evalsha calls, and MONITOR sees no other client command."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=trip")
    control = own_server.client(socket_timeout=5)
    watcher = own_server.client(socket_timeout=5)
    try:
        base = recent_second(store, ago_s=8)
        # warm-up: registers the job and loads every script (the first call of each)
        first = [store.claim("w", base + i * 1_000, runner="r", lease_ms=LONG, overlap="allow").run for i in range(3)]
        assert all(run is not None for run in first)
        assert store.heartbeat("w", first[0].slot_ms, first[0].token, LONG)  # type: ignore[union-attr]
        assert store.finish("w", first[0].slot_ms, first[0].token, "success")  # type: ignore[union-attr]
        assert store.release("w", first[1].slot_ms, first[1].token)  # type: ignore[union-attr]
        marker = uuid.uuid4().hex
        control_port = str(control.client_info()["addr"]).rsplit(":", 1)[1]
        with watcher.monitor() as monitor:
            control.config_resetstat()
            slot = base + 3_000
            claim = store.claim("w", slot, runner="r", lease_ms=LONG, overlap="allow")
            assert claim.outcome == "won" and claim.run is not None
            assert store.heartbeat("w", slot, claim.run.token, LONG)
            assert store.finish("w", slot, claim.run.token, "success")
            assert store.release("w", first[2].slot_ms, first[2].token)  # type: ignore[union-attr]
            stats = control.info("commandstats")
            control.echo(marker)
            seen = client_commands(monitor, marker, control_port)
        names = {key[len("cmdstat_"):]: value for key, value in stats.items()}
        assert names["evalsha"]["calls"] == 4, names
        assert names["evalsha"].get("failed_calls", 0) == 0
        assert set(names) <= {"evalsha"} | SCRIPT_COMMANDS | OWN_COMMANDS, names
        assert [c.split()[0].upper() for c in seen] == ["EVALSHA"] * 4, seen
    finally:
        store.close()
        control.close()
        watcher.close()


def test_a_flushed_script_is_loaded_again_and_the_claim_is_correct(own_server: servers.Server) -> None:
    """After SCRIPT FLUSH (as after a restart) the next claim gets NOSCRIPT, loads the script,
    calls EVALSHA again and decides correctly; the next operations work too."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=flush")
    control = own_server.client(socket_timeout=5)
    try:
        slot = recent_second(store)
        old = store.claim("job", slot - 1_000, runner="r", lease_ms=SHORT)
        assert old.outcome == "won" and old.run is not None
        expire_all(store, [old.run])
        control.script_flush()
        control.config_resetstat()
        before = store.now_ms()
        claim = store.claim("job", slot, runner="r2", lease_ms=LONG)
        after = store.now_ms()
        names = {key[len("cmdstat_"):]: value for key, value in control.info("commandstats").items()}
        assert names["script|load"]["calls"] == 1, names
        assert names["evalsha"]["calls"] == 2 and names["evalsha"]["failed_calls"] == 1, names
        assert claim.outcome == "won" and claim.run is not None
        run = claim.run
        assert (run.slot_ms, run.attempt, run.runner, run.status) == (slot, 1, "r2", "running")
        assert before <= run.started_ms <= after and run.lease_end_ms == run.started_ms + LONG
        assert store.get_run("job", slot) == run
        interrupted = store.get_run("job", slot - 1_000)
        assert interrupted is not None and interrupted.status == "interrupted"
        control.script_flush()
        assert store.heartbeat("job", slot, run.token, LONG)
        control.script_flush()
        assert store.finish("job", slot, run.token, "success")
        assert store.get_run("job", slot).status == "success"  # type: ignore[union-attr]
    finally:
        store.close()
        control.close()


# -- 5. exact big integers ------------------------------------------------------------------------------


def test_lease_of_2_pow_50_is_stored_exactly(redis_like: Backend) -> None:
    """A claim and a heartbeat with lease_ms=2**50 store lease_end_ms = now + 2**50 exactly
    (Lua's tostring would keep only 14 digits)."""
    store = redis_like.open()
    slot = recent_second(store)
    claim = store.claim("big", slot, runner="r", lease_ms=2**50)
    assert claim.outcome == "won" and claim.run is not None
    run = store.get_run("big", slot)
    assert run is not None and run == claim.run
    assert run.lease_end_ms - run.started_ms == 2**50
    assert claim.run.lease_end_ms - claim.run.started_ms == 2**50

    before = store.now_ms()
    assert store.heartbeat("big", slot, run.token, 2**50)
    after = store.now_ms()
    renewed = store.get_run("big", slot)
    assert renewed is not None
    assert before <= renewed.lease_end_ms - 2**50 <= after, (renewed.lease_end_ms - 2**50 - before, after - before)
    assert renewed.started_ms == run.started_ms
    # the lease of 2**50 is alive: a claim makes its caller a backup
    assert store.claim("big", slot, runner="other").outcome == "running"


def test_old_and_big_slots_round_trip_exactly(redis_like: Backend) -> None:
    """Slots from the epoch to now (13-digit integers through Lua) come back exactly as sent."""
    store = redis_like.open()
    now = store.now_ms()
    slots = [0, 1, 999, 10**12 + 1, now - 1]
    for i, slot in enumerate(slots):
        run = store.claim(f"j{i}", slot, runner="r", lease_ms=LONG, max_late_ms=ANY_AGE).run
        assert run is not None and run.slot_ms == slot
        assert store.get_run(f"j{i}", slot) == run
        assert store.runs(f"j{i}")[0].slot_ms == slot


# -- 6. server name and version ------------------------------------------------------------------------------


def test_server_version_names_redis(redis_backend: Backend) -> None:
    """server_version() on the system Redis says Redis and its version."""
    host, port = redis_backend.nodes()[0]
    store = redis_backend.open()
    client = redis.Redis(host=host, port=port)
    try:
        info = client.info("server")
        assert store.server_version() == f"Redis {info['redis_version']}"
        assert store.server_version().startswith("Redis 7.")
    finally:
        client.close()


def test_server_version_names_valkey_not_its_fake_redis_version(tmp_path: Path) -> None:
    """server_version() on Valkey says Valkey 9.x, although Valkey also reports a redis_version of 7.2.4."""
    backend = ValkeyBackend(tmp_path)
    store = backend.open()
    try:
        info = SERVERS.valkey().info()
        assert info["redis_version"] != info["valkey_version"]  # what makes the test worth having
        version = store.server_version()
        assert version == f"Valkey {info['valkey_version']}"
        assert version.startswith("Valkey 9.")
    finally:
        backend.close()


# -- 7. a real cluster -------------------------------------------------------------------------------------


@pytest.fixture
def on_cluster(tmp_path: Path) -> Iterator[Tuple[Store, List[redis.Redis], str]]:
    """A store on the session's 3-master cluster (through ?cluster=true) with a prefix of this
    test's own, a client of each master node, and the prefix."""
    backend = ClusterBackend(tmp_path)
    store = backend.open()
    nodes = [node.client(socket_timeout=5) for node in SERVERS.cluster().nodes]
    try:
        yield store, nodes, backend.namespace
    finally:
        for node in nodes:
            node.close()
        backend.close()


def holder(held: List[Set[str]], keys: Set[str]) -> int:
    """The one node whose keys (``held``: each node's) include all of ``keys``; no other holds any."""
    on = [i for i, node_keys in enumerate(held) if keys <= node_keys]
    assert len(on) == 1, (keys, on)
    assert all(not keys & node_keys for i, node_keys in enumerate(held) if i != on[0]), keys
    return on[0]


def test_cluster_spreads_jobs_over_the_masters_and_keeps_each_job_on_one_node(
    on_cluster: Tuple[Store, List[redis.Redis], str],
) -> None:
    """Through ?cluster=true, 30 jobs' runs land on all three masters; each job's four keys sit on
    one node; jobs() lists exactly the 30 names; runs() and unfinished() work for each."""
    store, nodes, prefix = on_cluster
    names = [f"job-{i}" for i in range(30)]
    assert isinstance(store.client, redis.cluster.RedisCluster)
    slot = recent_second(store)
    runs: Dict[str, Tuple[Run, Run]] = {}
    for name in names:
        first = store.claim(name, slot, runner="r", lease_ms=LONG).run
        assert first is not None
        assert store.finish(name, slot, first.token, "success")
        second = store.claim(name, slot + 1_000, runner="r", lease_ms=LONG).run
        assert second is not None
        runs[name] = (first, second)

    held = [keys_under(node, prefix) for node in nodes]  # SCAN on a node: its own keys only
    holders = {name: holder(held, set(job_keys(prefix, name))) for name in names}
    assert set(holders.values()) == {0, 1, 2}, holders

    assert store.jobs() == sorted(names)
    for name in names:
        first, second = runs[name]
        assert [r.slot_ms for r in store.runs(name)] == [slot + 1_000, slot]
        assert store.runs(name)[1].status == "success"
        assert store.unfinished(name) == [second]


# -- 8. the texts of interrupted runs ------------------------------------------------------------------------


def interruptions(store: Store, scenarios: List[Tuple[str, int]]) -> Dict[str, Optional[str]]:
    """For each (job, slot S): claim S with a short lease, let it expire, claim S+1000; the error
    stored on S's run. Also, for the job "late-<job>": claim S, claim S+1000 (overlap allowed)
    while S is alive, let S expire, and send a takeover claim for S."""
    first = {}
    for job, slot in scenarios:
        first[job] = store.claim(job, slot, runner="r", lease_ms=SHORT, max_late_ms=ANY_AGE).run
        first["late-" + job] = store.claim("late-" + job, slot, runner="r", lease_ms=SHORT, max_late_ms=ANY_AGE).run
        newer = store.claim(
            "late-" + job, slot + 1_000, runner="r", lease_ms=LONG, max_late_ms=ANY_AGE, overlap="allow"
        )
        assert newer.outcome == "won", newer
    assert all(run is not None for run in first.values())
    expire_all(store, list(first.values()))  # type: ignore[arg-type]
    errors: Dict[str, Optional[str]] = {}
    for job, slot in scenarios:
        newer = store.claim(job, slot + 1_000, runner="r", lease_ms=LONG, max_late_ms=ANY_AGE)
        assert newer.outcome == "won", newer
        taken = store.claim("late-" + job, slot, runner="r", reason="takeover", max_late_ms=ANY_AGE)
        assert taken.outcome == "done", taken
        for name in (job, "late-" + job):
            run = store.get_run(name, slot)
            assert run is not None and run.status == "interrupted", (name, run)
            errors[name] = run.error
    return errors


def test_interrupted_runs_have_the_same_error_text_as_sqlite(redis_like: Backend, tmp_path: Path) -> None:
    """A run superseded by a newer slot is interrupted with 'superseded: slot <ISO> started first',
    the ISO datetime built by the Lua exactly as SQLite's Python builds it (with and without
    milliseconds, across leap days and year ends)."""
    redis_store = redis_like.open()
    sqlite_store = leasecron.open_store(f"sqlite:///{tmp_path / 'texts.db'}")
    try:
        now = max(redis_store.now_ms(), sqlite_store.now_ms())
        whole = now - now % 1000 - 20_000
        scenarios = [
            ("whole", whole),
            ("millis", whole + 123),
            ("one-ms", whole + 1),
            ("ten-ms", whole + 10),
            ("last-ms", whole + 999),
            ("epoch", 0),
            ("y2k", utc_ms(1999, 12, 31, 23, 59, 59, ms=999)),
            ("leap-1972", utc_ms(1972, 2, 28, 23, 59, 59, ms=500)),
            ("leap-2000", utc_ms(2000, 2, 28, 23, 59, 59)),
            ("leap-day-end", utc_ms(2024, 2, 29, 23, 59, 59, ms=7)),
            ("non-leap-2023", utc_ms(2023, 2, 28, 23, 59, 59, ms=40)),
            ("noon", utc_ms(2021, 7, 14, 12, 0, 0, ms=250)),
        ]
        from_redis = interruptions(redis_store, scenarios)
        from_sqlite = interruptions(sqlite_store, scenarios)
        for job, slot in scenarios:
            expected = f"superseded: slot {slot_datetime(slot + 1_000).isoformat()} started first"
            assert from_sqlite[job] == expected
            assert from_redis[job] == expected, job
            assert from_redis["late-" + job] == from_sqlite["late-" + job] == expected, job
        assert from_redis["whole"] == f"superseded: slot {slot_datetime(whole + 1_000).isoformat()} started first"
        assert "." not in from_redis["whole"]  # type: ignore[operator]
        assert ".123000+00:00" in from_redis["millis"]  # type: ignore[operator]
        assert "2000-01-01T00:00:00.999000+00:00" in from_redis["y2k"]  # type: ignore[operator]
        assert "2000-02-29T00:00:00+00:00" in from_redis["leap-2000"]  # type: ignore[operator]
        assert "2023-03-01T00:00:00.040000+00:00" in from_redis["non-leap-2023"]  # type: ignore[operator]
    finally:
        sqlite_store.close()


def test_max_attempts_error_text_matches_sqlite(redis_like: Backend, tmp_path: Path) -> None:
    """A run whose runners died max_attempts times is interrupted with the same text as on SQLite."""
    redis_store = redis_like.open()
    sqlite_store = leasecron.open_store(f"sqlite:///{tmp_path / 'attempts.db'}")
    try:
        texts = []
        for store in (redis_store, sqlite_store):
            texts_of_store = []
            for max_attempts in (1, 2):
                job = f"dies-{max_attempts}"
                slot = recent_second(store)
                run = store.claim(job, slot, runner="r", lease_ms=SHORT, max_attempts=max_attempts).run
                assert run is not None
                for attempt in range(2, max_attempts + 1):
                    expire_all(store, [run])
                    taken = store.claim(
                        job, slot, runner="r", reason="takeover", lease_ms=SHORT, max_attempts=max_attempts
                    )
                    assert taken.outcome == "won" and taken.run is not None and taken.run.attempt == attempt
                    run = taken.run
                expire_all(store, [run])
                done = store.claim(job, slot, runner="r", reason="takeover", max_attempts=max_attempts)
                assert done.outcome == "done" and done.run is not None, done
                assert done.run.status == "interrupted"
                assert store.get_run(job, slot) == done.run
                texts_of_store.append(done.run.error)
            texts.append(texts_of_store)
        assert texts[0] == texts[1] == [
            "max_attempts (1) used up by runners that died",
            "max_attempts (2) used up by runners that died",
        ]
    finally:
        sqlite_store.close()


def test_jobs_lists_a_job_claimed_again_after_a_restart_that_lost_the_data(own_server: servers.Server) -> None:
    """jobs() lists a job whose runs were stored again after the server forgot everything (no persistence)."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=p&socket_timeout=0.2")
    try:
        now = store.now_ms()
        assert store.claim("job", now - 1000, runner="r").outcome == "won" and store.jobs() == ["job"]
        own_server.restart()  # no persistence: it comes back empty
        assert store.jobs() == []
        assert store.claim("job", now, runner="r").outcome == "won"
        assert [r.slot_ms for r in store.runs("job")] == [now]
        assert store.jobs() == ["job"]
    finally:
        store.close()


@pytest.mark.parametrize("appendonly", [False, True])
def test_durability_warning_names_a_server_without_aof(tmp_path: Path, appendonly: bool) -> None:
    """check's durability warning: a server without AOF forgets leases on restart; AOF with fsync always is quiet."""
    binary = required_binary("valkey")
    with servers.Server(binary, tmp_path / "valkey", appendonly=appendonly) as server:
        store = leasecron.open_store(server.url("valkey") + "?prefix=d")
        try:
            warnings = store.durability_warnings()
        finally:
            store.close()
    if appendonly:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "without AOF" in warnings[0] and "appendonly yes" in warnings[0]


# -- 9. runs stored by 0.1, pauses, requests and their index ---------------------------------------


def write_run_of_0_1(client: Any, prefix: str, job: str, slot: int, **fields: Any) -> Dict[str, Any]:
    """A run written as leasecron 0.1's Lua wrote it: no attempts and no manual flag, every integer
    as decimal text; ``fields`` replace the defaults (a running run whose lease ended a while ago).
    Its slot goes into the job's slots zset and into running or finished by its status."""
    runs, slots, running, finished = job_keys(prefix, job)
    run: Dict[str, Any] = {
        "attempt": "1", "token": "t-0.1", "runner": "old-1", "reason": "schedule", "status": "running",
        "lease_end_ms": str(slot + 200), "released": "0", "handovers": "0", "started_ms": str(slot + 10),
    }  # fmt: skip
    run.update(fields)
    client.hset(runs, str(slot), json.dumps(run))
    client.zadd(slots, {str(slot): slot})
    client.zadd(running if run["status"] == "running" else finished, {str(slot): slot})
    return run


def test_runs_stored_by_0_1_read_as_one_attempt_and_every_change_appends_to_it(redis_like: Backend) -> None:
    """A 0.1 record (no attempts field) reads as the one attempt its fields describe; the scripts
    first make that attempt, then record theirs: a takeover ends it expired at its lease end (or
    handed_over when it was released), finish ends it, a newer run's claim interrupts it."""
    store = redis_like.open()
    prefix = redis_like.namespace
    client = node_client(redis_like)
    try:
        slot = recent_second(store, ago_s=20)
        write_run_of_0_1(client, prefix, "dead", slot)
        write_run_of_0_1(client, prefix, "released", slot, released="1", handovers="1", lease_end_ms=str(slot + 90))
        write_run_of_0_1(client, prefix, "live", slot, lease_end_ms=str(slot + 10**9))
        write_run_of_0_1(client, prefix, "superseded", slot)
        write_run_of_0_1(
            client, prefix, "ended", slot, status="interrupted", error="superseded", finished_ms=str(slot + 500)
        )
        one = Attempt(1, "old-1", "schedule", slot + 10, None, "running", None)
        assert store.get_run("dead", slot).attempts == (one,)  # type: ignore[union-attr]
        assert store.get_run("ended", slot).attempts == (  # type: ignore[union-attr]
            Attempt(1, "old-1", "schedule", slot + 10, slot + 500, "interrupted", "superseded"),
        )

        taken = store.claim("dead", slot, runner="new", reason="takeover", lease_ms=LONG, max_late_ms=ANY_AGE).run
        assert taken is not None and taken.attempt == 2
        assert taken.attempts == (
            Attempt(1, "old-1", "schedule", slot + 10, slot + 200, "expired", None),
            Attempt(2, "new", "takeover", taken.started_ms, None, "running", None),
        )
        stored = json.loads(client.hget(job_keys(prefix, "dead")[0], str(slot)))
        assert stored["attempts"][0] == {
            "number": "1", "runner": "old-1", "reason": "schedule", "started_ms": str(slot + 10),
            "ended_ms": str(slot + 200), "outcome": "expired", "error": None,
        }  # fmt: skip
        assert store.finish("dead", slot, taken.token, "failed", error="boom")
        assert [(a.number, a.outcome, a.error) for a in store.get_run("dead", slot).attempts] == [  # type: ignore
            (1, "expired", None),
            (2, "failed", "boom"),
        ]

        handed = store.claim("released", slot, runner="new", reason="takeover", max_late_ms=ANY_AGE).run
        assert handed is not None
        assert [(a.outcome, a.ended_ms) for a in handed.attempts] == [("handed_over", slot + 90), ("running", None)]

        assert store.finish("live", slot, "t-0.1", "success")
        done = store.get_run("live", slot)
        assert done is not None and done.finished_ms is not None
        assert done.attempts == (Attempt(1, "old-1", "schedule", slot + 10, done.finished_ms, "success", None),)

        assert store.claim("superseded", slot + 1_000, runner="new", max_late_ms=ANY_AGE).outcome == "won"
        old = store.get_run("superseded", slot)
        assert old is not None and old.status == "interrupted"
        assert old.attempts == (Attempt(1, "old-1", "schedule", slot + 10, slot + 200, "expired", None),)
    finally:
        client.close()


@pytest.mark.parametrize(
    "attempts",
    ['"many"', "[]", "{}", "[1]", '[{"number": "1"}]', '[{"number": "x", "outcome": "running"}]'],
)
def test_a_run_with_tampered_attempts_is_a_store_error_naming_it(redis_like: Backend, attempts: str) -> None:
    """Attempts that are no list of attempts make the Python reads and the scripts refuse the run,
    with a StoreError naming the job and the slot; the script writes nothing."""
    store = redis_like.open()
    client = node_client(redis_like)
    try:
        slot = recent_second(store)
        run = store.claim("job", slot, runner="r", lease_ms=LONG).run
        assert run is not None
        key = job_keys(redis_like.namespace, "job")[0]
        raw = client.hget(key, str(slot)).decode()
        assert '"attempts"' not in raw  # its one attempt is its own fields: none is stored
        tampered = raw[:-1] + f',"attempts":{attempts}}}'
        assert json.loads(tampered)["attempts"] == json.loads(attempts)
        client.hset(key, str(slot), tampered)
        for read in (lambda: store.get_run("job", slot), lambda: store.finish("job", slot, run.token, "success")):
            with pytest.raises(StoreError) as info:
                read()
            assert "job" in str(info.value) and str(slot) in str(info.value)
        assert client.hget(key, str(slot)).decode() == tampered
    finally:
        client.close()


def test_a_tampered_request_is_a_store_error_naming_it(redis_like: Backend) -> None:
    """A request whose JSON was tampered with makes job_state and the manual claim of its slot
    raise StoreError naming the job and the slot; nothing is run."""
    store = redis_like.open()
    client = node_client(redis_like)
    try:
        made = store.request_run("job", by="ops")
        requests = control_keys(redis_like.namespace, "job")[1]
        for garbage in (b"{garbage", b'{"requested_by": "ops", "expires_ms": "soon", "state": "pending"}'):
            client.hset(requests, str(made.slot_ms), garbage)
            for call in (
                lambda: store.job_state("job"),
                lambda: store.claim("job", made.slot_ms, runner="r", reason="manual"),
            ):
                with pytest.raises(StoreError) as info:
                    call()
                assert "job" in str(info.value) and str(made.slot_ms) in str(info.value), info.value
        assert store.get_run("job", made.slot_ms) is None
    finally:
        client.close()


def test_the_keys_of_pauses_and_requests_are_exactly_the_documented_ones(redis_like: Backend) -> None:
    """pause writes the job's paused key and <prefix>:controlled; resume deletes paused;
    request_run writes the job's requests key and <prefix>:pending; each job's six keys share
    one hash tag and cluster slot. SCAN MATCH <prefix>:* on a fresh prefix."""
    store = redis_like.open()
    prefix = redis_like.namespace
    client = node_client(redis_like)
    try:
        paused, requests = control_keys(prefix, "job")
        controlled, pending = f"{prefix}:controlled", f"{prefix}:pending"
        store.pause("job", by="ops", note="why")
        assert keys_under(client, prefix) == {paused, controlled}
        assert client.type(paused) == b"hash" and client.type(controlled) == b"set"
        store.resume("job", by="ops")
        assert keys_under(client, prefix) == {controlled}
        made = store.request_run("job", by="ops")
        assert keys_under(client, prefix) == {controlled, requests, pending}
        assert client.type(requests) == b"hash" and client.type(pending) == b"zset"
        assert store.claim("job", made.slot_ms, runner="r", reason="manual").outcome == "won"
        runs, slots, running, _ = job_keys(prefix, "job")
        assert keys_under(client, prefix) == {controlled, requests, runs, slots, running, pending, f"{prefix}:jobs"}
        for name in TRICKY_NAMES:
            keys = job_keys(prefix, name) + control_keys(prefix, name)
            assert len(set(keys)) == 6 and len({hash_tag(k) for k in keys}) == 1, name
            assert len({redis.cluster.key_slot(k.encode()) for k in keys}) == 1, name
    finally:
        client.close()


def test_controls_take_the_documented_round_trips(own_server: servers.Server) -> None:
    """pause: SADD + EVALSHA; resume, job_state, pending_requests and a paused scheduled claim: one
    EVALSHA; request_run: SADD + EVALSHA + EVALSHA (the index); a manual claim that wins: EVALSHA +
    EVALSHA (marked claimed in the index); a manual claim that finds the request claimed: EVALSHA.
    MONITOR sees no other client command."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=ctl")
    control = own_server.client(socket_timeout=5)
    watcher = own_server.client(socket_timeout=5)
    try:
        warm = store.request_run("w", by="ops")  # loads every script, registers the job
        assert store.claim("w", warm.slot_ms, runner="r", reason="manual", overlap="allow").outcome == "won"
        store.pause("w", by="ops")
        store.resume("w", by="ops")
        store.job_state("w")
        marker = uuid.uuid4().hex
        control_port = str(control.client_info()["addr"]).rsplit(":", 1)[1]
        slot = recent_second(store)
        expected = []
        with watcher.monitor() as monitor:
            store.pause("w", by="ops", note="n")
            expected += ["SADD", "EVALSHA"]
            assert store.claim("w", slot, runner="r").outcome == "paused"
            expected += ["EVALSHA"]
            store.resume("w", by="ops")
            store.job_state("w")
            expected += ["EVALSHA", "EVALSHA"]
            made = store.request_run("w", by="ops")
            expected += ["SADD", "EVALSHA", "EVALSHA"]
            warm_claimed = dataclasses.replace(warm, state="claimed")
            assert store.pending_requests() == [warm_claimed, made]
            expected += ["EVALSHA"]
            assert store.claim("w", made.slot_ms, runner="r", reason="manual", overlap="allow").outcome == "won"
            expected += ["EVALSHA", "EVALSHA"]
            assert store.pending_requests() == [warm_claimed, dataclasses.replace(made, state="claimed")]
            expected += ["EVALSHA"]
            assert store.claim("w", made.slot_ms, runner="r2", reason="manual").outcome == "running"
            expected += ["EVALSHA"]
            control.echo(marker)
            seen = client_commands(monitor, marker, control_port)
        assert [c.split()[0].upper() for c in seen] == expected, seen
    finally:
        store.close()
        control.close()
        watcher.close()


def test_pending_requests_reads_the_index_only(own_server: servers.Server) -> None:
    """pending_requests() is one script that sends TIME and one ZRANGEBYSCORE, however many jobs,
    runs and ended requests the store holds: its cost grows with the open requests only."""
    store = leasecron.open_store(own_server.url("valkey") + "?prefix=idx")
    control = own_server.client(socket_timeout=5)
    try:
        claimed = []
        for i in range(40):
            made = store.request_run(f"job-{i}", by="ops")
            assert store.claim(f"job-{i}", made.slot_ms, runner="r", reason="manual").outcome == "won"
            claimed.append(dataclasses.replace(made, state="claimed"))
        waiting = [store.request_run(f"job-{i}", by="ops") for i in range(3)]
        control.config_resetstat()
        assert store.pending_requests() == sorted(claimed + waiting, key=lambda r: (r.slot_ms, r.job))
        names = {key[len("cmdstat_"):]: value["calls"] for key, value in control.info("commandstats").items()}
        assert names == {"evalsha": 1, "time": 1, "zrangebyscore": 1, "config|resetstat": 1}, names
    finally:
        store.close()
        control.close()


def test_the_index_heals_an_entry_left_behind_and_forgets_expired_ones(redis_like: Backend) -> None:
    """A claimed request's entry is marked claimed; one whose change after the claim was lost (put
    back here by hand) is listed as pending, and an instance's manual claim finds the run (running:
    a backup); a skipped request's entry whose removal was lost is removed by the manual claim that
    finds it skipped; an entry that expired is not listed, and the next request_run deletes it."""
    store = redis_like.open()
    other = redis_like.open()
    client = node_client(redis_like)
    pending = f"{redis_like.namespace}:pending"
    try:
        made = store.request_run("job", by="ops")
        run = store.claim("job", made.slot_ms, runner="r", reason="manual", lease_ms=LONG).run
        claimed = dataclasses.replace(made, state="claimed")
        assert run is not None and store.pending_requests() == [claimed]
        client.delete(pending)
        member = index_member("job", made.slot_ms, "ops")
        client.zadd(pending, {member: made.expires_ms})  # as if the change had failed
        assert store.pending_requests() == [made]
        backup = other.claim("job", made.slot_ms, runner="r2", reason="manual")
        assert backup.outcome == "running" and backup.run == run
        assert store.pending_requests() == [made]  # left as it was: harmless, until it expires

        skipped = store.request_run("job", by="ops")
        assert store.claim("job", skipped.slot_ms, runner="r", reason="manual").outcome == "overlap"
        assert client.zscore(pending, index_member("job", skipped.slot_ms, "ops")) is None
        client.zadd(pending, {index_member("job", skipped.slot_ms, "ops"): skipped.expires_ms})  # a lost removal
        assert other.claim("job", skipped.slot_ms, runner="r2", reason="manual").outcome == "none"
        assert client.zscore(pending, index_member("job", skipped.slot_ms, "ops")) is None

        gone = index_member("gone", 5, "ops")
        client.zadd(pending, {gone: store.now_ms() - 1})
        assert store.pending_requests() == [made]
        assert client.zscore(pending, gone) is not None
        store.request_run("job", by="ops")
        assert client.zscore(pending, gone) is None
    finally:
        client.close()


def test_cluster_keeps_each_jobs_controls_with_its_runs_and_finds_the_requests_of_every_node(
    on_cluster: Tuple[Store, List[redis.Redis], str],
) -> None:
    """On a 3-master cluster, 18 jobs' paused and requests keys sit on the node of their runs;
    job_states() lists every paused job and every job with requests; pending_requests() finds the
    requests of jobs on every node in one call; each is claimed once."""
    store, nodes, prefix = on_cluster
    names = [f"job-{i}" for i in range(18)]
    for name in names[::2]:
        store.pause(name, by="ops", note=name)
    made = {name: store.request_run(name, by="ops") for name in names[1::2]}
    assert [s.job for s in store.job_states()] == sorted(names)
    made.update({name: store.request_run(name, by="ops") for name in names[::2]})  # paused: runs all the same
    runs_slot = recent_second(store)
    assert [s.job for s in store.job_states() if s.paused] == sorted(names[::2])
    assert store.pending_requests() == sorted(made.values(), key=lambda r: (r.slot_ms, r.job))
    for name in names:
        assert store.claim(name, made[name].slot_ms, runner="r", reason="manual").outcome == "won"
        assert store.claim(name, made[name].slot_ms, runner="r2", reason="manual").outcome == "running"
        assert store.claim(name, runs_slot, runner="r").outcome == ("paused" if name in names[::2] else "overlap")
    claimed = [dataclasses.replace(request, state="claimed") for request in made.values()]
    assert store.pending_requests() == sorted(claimed, key=lambda r: (r.slot_ms, r.job))
    assert store.jobs() == sorted(names)
    held = [keys_under(node, prefix) for node in nodes]  # SCAN on a node: its own keys only
    holders = set()
    for i, name in enumerate(names):
        runs, slots, running, _ = job_keys(prefix, name)
        paused, requests = control_keys(prefix, name)
        holders.add(holder(held, {runs, slots, running, requests} | ({paused} if i % 2 == 0 else set())))
    assert holders == {0, 1, 2}


def test_a_failed_index_write_fails_request_run_and_a_failed_removal_leaves_the_claim_standing(
    redis_like: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """The two ends of the index's failure cases (the index key made unwritable here): request_run
    raises StoreError saying the stored request will not be found, and the request reads pending in
    the job's state, no run started; a manual claim whose change of the index fails still wins,
    and the failure is logged."""
    store = redis_like.open()
    client = node_client(redis_like)
    pending = f"{redis_like.namespace}:pending"
    try:
        made = store.request_run("job", by="ops")
        client.delete(pending)
        client.set(pending, "not a sorted set")
        with pytest.raises(StoreError) as info:
            store.request_run("lost", by="ops")
        assert "no instance will find it" in str(info.value)
        (lost,) = store.job_state("lost").requests
        assert lost.pending and store.get_run("lost", lost.slot_ms) is None

        with caplog.at_level("WARNING", logger="leasecron"):
            claimed = store.claim("job", made.slot_ms, runner="r", reason="manual")
        assert claimed.outcome == "won"
        assert any("claimed in the index" in record.getMessage() for record in caplog.records)
        assert store.job_state("job").requests[0].state == "claimed"
    finally:
        client.delete(pending)
        client.close()


def test_hundreds_of_calls_at_once_wait_for_a_connection_instead_of_failing(redis_like: Backend) -> None:
    """400 threads claim and finish at once through one store made from a URL: its client holds at
    most 64 connections (per node) and the calls beyond them wait for one, so none fails (redis-py's
    own pool, of 100, raised MaxConnectionsError at the 101st)."""
    store = redis_like.open()
    assert isinstance(store, RedisStore)
    pool = store.client.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == 64
    slot = recent_second(store)
    errors: List[BaseException] = []
    start = threading.Barrier(400)

    def claim_and_finish(i: int) -> None:
        try:
            start.wait(10)
            run = store.claim(f"job-{i}", slot, runner="r", lease_ms=LONG).run
            assert run is not None and store.finish(run.job, slot, run.token, "success")
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=claim_and_finish, args=(i,)) for i in range(400)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(store.jobs()) == 400
    assert len(pool._connections) <= 64  # type: ignore[attr-defined]
    store.close()


# -- 10. stored schedules: their keys, the changelog, round trips, a 0.2 keyspace ---------------------------


def test_a_0_2_keyspace_keeps_its_runs_and_controls_and_takes_stored_schedules(redis_like: Backend) -> None:
    """A keyspace written by 0.2 (runs, a run of 0.1, a pause and a request; no job has a schedule
    key) reads as before: every job at version 0, nothing stored, no change. Its claims from
    version 0 win; once a job's schedule is set, its runs and controls are untouched, its claims
    from version 0 are stale and those from the new version decided as before."""
    store = redis_like.open()
    prefix = redis_like.namespace
    client = node_client(redis_like)
    try:
        slot = recent_second(store, ago_s=20)
        done = store.claim("done", slot, runner="r", lease_ms=LONG).run
        assert done is not None and store.finish("done", slot, done.token, "success")
        assert store.claim("live", slot, runner="r", lease_ms=LONG).won
        write_run_of_0_1(client, prefix, "older", slot, status="success", finished_ms=str(slot + 500))
        store.pause("paused", by="ops", note="why")
        made = store.request_run("asked", by="ops")
        names = ["done", "live", "older", "paused", "asked"]
        before = {name: (store.runs(name), store.job_state(name)) for name in names}
        assert not [key for key in keys_under(client, prefix) if key.endswith(":schedule") or ":{:" in key]
        assert [store.stored_schedule(name) for name in names] == [None] * len(names)
        assert store.schedule_changes(0) == ScheduleChanges(0, ()) and store.poll(0).requests == [made]

        assert store.claim("older", slot + 1_000, runner="r", max_late_ms=ANY_AGE).won  # version 0: as in 0.2
        changed = {name: store.set_schedule(name, by="ops", schedule=60) for name in ("done", "live", "paused")}
        assert {name: record.version for name, record in changed.items()} == {"done": 1, "live": 1, "paused": 1}
        for name in ("done", "live", "paused", "asked"):
            assert (store.runs(name), store.job_state(name)) == before[name], name
        assert store.claim("done", slot + 1_000, runner="r", max_late_ms=ANY_AGE).outcome == "stale"
        assert store.claim("done", slot + 1_000, runner="r", max_late_ms=ANY_AGE, version=1).won
        assert store.claim("live", slot, runner="r2").outcome == "running"  # a slot with a run: as before
        assert store.claim("paused", slot, runner="r", max_late_ms=ANY_AGE).outcome == "stale"
        assert store.claim("paused", slot, runner="r", max_late_ms=ANY_AGE, version=1).outcome == "paused"
        assert store.claim("asked", made.slot_ms, runner="r", reason="manual").won
        assert [r.job for r in store.schedule_changes(0).changes] == ["done", "live", "paused"]
    finally:
        client.close()


def test_the_keys_of_stored_schedules_are_exactly_the_documented_ones(redis_like: Backend) -> None:
    """set_schedule writes the job's schedule key (a hash in its runs' hash tag: version and ms as
    decimal text, kwargs and options as the JSON text Python wrote) and the changelog's three keys,
    which share the hash tag ``:schedules``, one no job name can get. SCAN MATCH <prefix>:* on a
    fresh prefix; a record gone back to the code keeps only version, ms, source and by."""
    store = redis_like.open()
    prefix = redis_like.namespace
    client = node_client(redis_like)
    try:
        cursor, changed, records = changelog_keys(prefix)
        kwargs = {"n": 2**64 + 1, "to": "ä/b"}
        record = store.set_schedule("job", by="app", schedule="*/5 * * * *", tz="Europe/Berlin", task="t",
                                    kwargs=kwargs, options={"lease_ms": 5000})  # fmt: skip
        key = schedule_key(prefix, "job")
        assert keys_under(client, prefix) == {key, cursor, changed, records}
        assert [client.type(k) for k in (key, cursor, changed, records)] == [b"hash", b"string", b"zset", b"hash"]
        assert client.hgetall(key) == {
            b"version": b"1", b"ms": str(record.updated_ms).encode(), b"source": b"stored", b"by": b"app",
            b"schedule": b"*/5 * * * *", b"tz": b"Europe/Berlin", b"task": b"t",
            b"kwargs": json.dumps(kwargs, ensure_ascii=False, separators=(",", ":")).encode(),
            b"options": b'{"lease_ms":5000}',
        }  # fmt: skip
        fields = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
        assert json.loads(client.hget(records, "job")) == fields
        assert (client.get(cursor), client.zscore(changed, "job")) == (b"1", 1.0)
        store.set_schedule("job", by="ops")
        assert set(client.hgetall(key)) == {b"version", b"ms", b"source", b"by"}

        assert {hash_tag(k) for k in (cursor, changed, records)} == {":schedules"}
        assert hash_tag(key) == hash_tag(job_keys(prefix, "job")[0])
        for name in TRICKY_NAMES + [":schedules", "{:schedules}", "schedules"]:
            assert hash_tag(schedule_key(prefix, name)) == hash_tag(job_keys(prefix, name)[0]) != ":schedules", name
            assert schedule_key(prefix, name) not in (cursor, changed, records), name
    finally:
        client.close()


def test_stored_schedules_take_the_documented_round_trips(own_server: servers.Server) -> None:
    """set_schedule: one round trip (MULTI, schedule.lua, changes.lua, EXEC); stored_schedule: one
    HGETALL; schedule_changes: one EVALSHA; poll: one round trip of two EVALSHA (the index and the
    changelog); a claim, stale or won: one EVALSHA, as before."""
    from tests.stores.test_redis_batch import CountingConnection, commands

    store = RedisStore.from_url(own_server.url("valkey") + "?prefix=sched", connection_class=CountingConnection)
    control = own_server.client(socket_timeout=5)
    try:
        slot = recent_second(store)
        store.set_schedule("w", by="ops", schedule=60)  # warm-up: connects, loads the scripts
        store.request_run("w", by="ops")
        store.poll(0)
        warm = store.claim("job", slot - 1_000, runner="r").run  # registers the job
        assert warm is not None and store.finish("job", warm.slot_ms, warm.token, "success")

        def trip(call: Any) -> Tuple[Any, int, Dict[str, int]]:
            control.config_resetstat()
            CountingConnection.sends.clear()
            answer = call()
            stats = {name: value["calls"] for name, value in commands(control).items()}
            del stats["config|resetstat"]
            return answer, sum(CountingConnection.sends.values()), stats

        record, sends, stats = trip(lambda: store.set_schedule("job", by="ops", schedule=30))
        assert record.version == 1 and sends == 1
        assert {k: stats[k] for k in ("multi", "evalsha", "exec")} == {"multi": 1, "evalsha": 2, "exec": 1}, stats
        assert trip(lambda: store.stored_schedule("job")) == (record, 1, {"hgetall": 1})
        changes, sends, stats = trip(lambda: store.schedule_changes(1))
        assert changes.changes == (record,) and (sends, stats["evalsha"]) == (1, 1)
        polled, sends, stats = trip(lambda: store.poll(1))
        assert polled.schedules == changes and len(polled.requests) == 1 and (sends, stats["evalsha"]) == (1, 2)
        said = Announcement("web-1", "host", 7, "0.3.0")
        store.poll(1, announce=said)  # loads instances.lua
        polled, sends, stats = trip(lambda: store.poll(1, announce=said))  # the announcement rides along
        assert polled.schedules == changes and (sends, stats["evalsha"]) == (1, 3)
        assert [i.runner for i in store.instances()] == ["web-1"]
        answer, sends, stats = trip(lambda: store.claim("job", slot, runner="r"))
        assert (answer.outcome, sends, stats["evalsha"]) == ("stale", 1, 1)
        answer, sends, stats = trip(lambda: store.claim("job", slot, runner="r", version=1))
        assert (answer.outcome, sends, stats["evalsha"]) == ("won", 1, 1)
    finally:
        store.close()
        control.close()


def test_a_flushed_server_makes_each_change_of_a_schedule_once(own_server: servers.Server) -> None:
    """After SCRIPT FLUSH the transaction's calls answer NOSCRIPT: both scripts are loaded and the
    calls sent again from the first one the server did not know, so the version is raised once and
    the changelog counts the change once; when only changes.lua was missing, it alone runs again."""
    from tests.stores.test_redis_batch import commands

    store = leasecron.open_store(own_server.url("valkey") + "?prefix=flushed")
    control = own_server.client(socket_timeout=5)
    try:
        assert store.set_schedule("job", by="ops", schedule=30).version == 1
        control.script_flush()
        control.config_resetstat()
        assert store.set_schedule("job", by="ops", schedule=40).version == 2
        stats = commands(control)
        assert stats["script|load"]["calls"] == 2 and stats["evalsha"]["failed_calls"] == 2, stats
        assert stats["evalsha"]["calls"] == 4 and stats["exec"]["calls"] == 2, stats

        control.script_flush()
        control.script_load(load_scripts()["schedule"].source)
        control.config_resetstat()
        assert store.set_schedule("job", by="ops", schedule=50).version == 3
        stats = commands(control)
        assert stats["script|load"]["calls"] == 1 and stats["evalsha"]["failed_calls"] == 1, stats
        assert stats["evalsha"]["calls"] == 3, stats
        changes = store.schedule_changes(0)
        assert changes.cursor == 3 and [(r.version, r.schedule) for r in changes.changes] == [(3, "50")]
    finally:
        store.close()
        control.close()


def test_the_changelog_keeps_the_newest_record_of_a_job_and_a_missed_change_is_fenced(
    redis_like: Backend,
) -> None:
    """A change that reaches the changelog after a newer one of its job (as two concurrent changes
    may on a cluster) is dropped, not counted. A change that never reached it (a failure between
    the two calls of a cluster's set_schedule, made here by running schedule.lua alone) is not
    listed, but the job's key fences the claims of its old version and stored_schedule reads it;
    the job's next change lists the newest record."""
    store = redis_like.open()
    assert isinstance(store, RedisStore)
    old = store.set_schedule("job", by="ops", schedule=30)
    new = store.set_schedule("job", by="ops", schedule=40)
    fields = ["version", "1", "ms", str(old.updated_ms), "source", "override", "by", "ops", "schedule", "30"]
    assert store._calls.changelog("re-adding", "add", "job", *fields) == 0
    assert store.schedule_changes(0) == ScheduleChanges(2, (new,))

    missed, _ = store._calls.write("schedule", "job", *schedule_args("ops", "override", "50", None, None, {}, {}))
    assert store.stored_schedule("job").version == 3  # type: ignore[union-attr]
    assert store.schedule_changes(0) == ScheduleChanges(2, (new,))
    slot = recent_second(store)
    assert store.claim("job", slot, runner="r", version=2).outcome == "stale"
    assert store.claim("job", slot, runner="r", version=3).won
    latest = store.set_schedule("job", by="ops", schedule=60)
    assert latest.version == 4 and store.schedule_changes(2) == ScheduleChanges(3, (latest,))
    assert missed[:2] in (["version", "3"], [b"version", b"3"])


def test_kwargs_come_back_exact_from_every_read(redis_like: Backend) -> None:
    """Integers beyond 2**53 and 2**64, floats, Unicode, slashes, nesting: set_schedule's answer,
    stored_schedule (the job's key), schedule_changes and poll (the changelog, re-encoded by Lua's
    cjson as text) all give back the same kwargs."""
    store = redis_like.open()
    kwargs: Dict[str, Any] = {
        "big": 2**64 + 1, "neg": -(2**70), "f": 0.1, "e": 1e300, "t": "é 🕐 </x> \\ \"q\"\t", "l": [[], {}, None, True],
    }  # fmt: skip
    record = store.set_schedule("job", by="app", schedule=30, task="t", kwargs=kwargs)
    reads = [record, store.stored_schedule("job"), *store.schedule_changes(0).changes, *store.poll(0).schedules.changes]
    assert len(reads) == 4
    assert all(r is not None and dict(r.kwargs) == kwargs for r in reads), reads
    assert all(r == record for r in reads)


def test_a_tampered_schedule_is_a_store_error_naming_its_job(redis_like: Backend) -> None:
    """A schedule key whose version is no integer, or whose kwargs are no JSON object, makes
    stored_schedule, set_schedule and a scheduled claim raise StoreError naming the job (the claim
    writes nothing); a tampered record in the changelog makes schedule_changes raise naming it."""
    store = redis_like.open()
    client = node_client(redis_like)
    try:
        store.set_schedule("job", by="ops", schedule=30)
        key = schedule_key(redis_like.namespace, "job")
        client.hset(key, "version", "x")
        for call in (
            lambda: store.stored_schedule("job"),
            lambda: store.set_schedule("job", by="ops", schedule=40),
            lambda: store.claim("job", recent_second(store), runner="r"),
        ):
            with pytest.raises(StoreError, match="'job'"):
                call()
        assert store.runs("job") == []
        client.hset(key, mapping={"version": "1", "kwargs": "[1]"})
        with pytest.raises(StoreError, match="schedule of job 'job' is unreadable"):
            store.stored_schedule("job")
        client.hset(changelog_keys(redis_like.namespace)[2], "job", "{garbage")
        with pytest.raises(StoreError, match="record of 'job' is unreadable"):
            store.schedule_changes(0)
    finally:
        client.close()


@pytest.mark.parametrize("backend_name", ["redis", "redis-cluster"])
def test_set_schedule_waits_for_the_replicas(backend_name: str, tmp_path: Path) -> None:
    """Rule 22: with replicas=1 on servers without replicas, set_schedule raises StoreUnavailable;
    the change was made on the primary (the version was raised), in the changelog too outside a
    cluster (one transaction); on a cluster the changelog was not written (the first call raised),
    and the job's key fences the old version all the same. The reads are never refused."""
    backend = BACKENDS[backend_name](tmp_path)
    try:
        waiting = leasecron.open_store(backend.url() + "&replicas=1&replica_wait_ms=20")
        plain = backend.open()
        with pytest.raises(StoreUnavailable, match="reached 0 of the 1 replicas"):
            waiting.set_schedule("job", by="ops", schedule=30)
        assert plain.stored_schedule("job").version == 1  # type: ignore[union-attr]
        listed = [r.version for r in plain.schedule_changes(0).changes]
        assert listed == ([] if backend_name == "redis-cluster" else [1])
        assert waiting.stored_schedule("job") == plain.stored_schedule("job")
        assert waiting.poll(0).schedules == plain.schedule_changes(0)
        assert waiting.claim("job", recent_second(waiting), runner="r").outcome == "stale"
        waiting.close()
    finally:
        backend.close()


def test_cluster_keeps_each_schedule_with_its_job_and_the_changelog_on_one_node(
    on_cluster: Tuple[Store, List[redis.Redis], str],
) -> None:
    """On a 3-master cluster, 18 jobs' schedule keys sit on the node of their runs (every master
    holds some), the changelog's three keys on one node; schedule_changes lists every change in
    order; set_schedule is two round trips (the job's node, the changelog's), poll one per node
    it reads (the index's and the changelog's)."""
    from tests.stores.test_redis_batch import CountingConnection

    store, nodes, prefix = on_cluster
    names = [f"job-{i}" for i in range(18)]
    slot = recent_second(store)
    for name in names:
        assert store.claim(name, slot, runner="r", lease_ms=LONG).won
    records = [store.set_schedule(name, by="ops", schedule=i + 1) for i, name in enumerate(names)]
    assert store.schedule_changes(0) == ScheduleChanges(18, tuple(records))
    held = [keys_under(node, prefix) for node in nodes]
    holders = {holder(held, {job_keys(prefix, name)[0], schedule_key(prefix, name)}) for name in names}
    assert holders == {0, 1, 2}
    changelog_node = holder(held, set(changelog_keys(prefix)))
    store.request_run("asked", by="ops")
    pending_node = holder([keys_under(node, prefix) for node in nodes], {f"{prefix}:pending"})

    url = f"{SERVERS.cluster().url()}?cluster=true&prefix={prefix}"
    counting = RedisStore.from_url(url, connection_class=CountingConnection)
    try:
        counting.poll(0)
        counting.set_schedule("job-0", by="ops", schedule=98)  # connects to the nodes it needs
        CountingConnection.sends.clear()
        assert counting.set_schedule("job-0", by="ops", schedule=99).version == 3
        assert sum(CountingConnection.sends.values()) == 2
        CountingConnection.sends.clear()
        polled = counting.poll(18)
        assert [(r.job, r.version) for r in polled.schedules.changes] == [("job-0", 3)] and len(polled.requests) == 1
        ports = [SERVERS.cluster().nodes[i].port for i in {changelog_node, pending_node}]
        assert sorted(CountingConnection.sends) == sorted(ports) and set(CountingConnection.sends.values()) == {1}
    finally:
        counting.close()
