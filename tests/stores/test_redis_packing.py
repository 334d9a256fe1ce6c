"""The Redis store's command packer (``stores/redis_packing.py``): the bytes redis-py would send."""

from __future__ import annotations

from typing import Any, Tuple

import pytest
import redis
from redis.connection import Connection

from leasecron.states import Reason, Status
from leasecron.stores.redis import RedisStore
from leasecron.stores.redis_packing import HiredisPacker, command_packer
from tests.conftest import Backend
from tests.stores.test_redis import redis_like  # noqa: F401 - the fixture: Redis and Valkey

COMMANDS = [
    ("EVALSHA", "a" * 40, 2, "leasecron:{job}:runs", "leasecron:{jöb}:running", 1796392800000, -5, "", b"raw\x00"),
    ("SET", "key", "ünïcode ✓"),
    ("TIME",),
    ("CONFIG GET", "maxmemory"),  # the first argument split in two (by redis-py)
    (b"CLIENT SETNAME", b"x"),
    ("SET", "key", 1.5),  # a float: redis-py's text
    ("SET", "key", 10**20),
    ("SET", "key", memoryview(b"view")),
    ("EVALSHA", "b" * 40, 0, Reason.TAKEOVER, Status.SUCCESS, 7),  # str Enum members: their text
]


def packer() -> HiredisPacker:
    made = command_packer(redis, {})
    assert made is not None, "hiredis is a dependency of the redis extra"
    return made


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: repr(c[0]))
def test_every_command_is_packed_to_the_bytes_redis_py_sends(command: Tuple[Any, ...]) -> None:
    assert b"".join(packer().pack(*command)) == b"".join(Connection().pack_command(*command))


def test_a_str_enum_member_is_packed_by_hiredis_as_its_text() -> None:
    class Counting:
        calls = 0

        def pack(self, *args: Any) -> Any:
            Counting.calls += 1
            return Connection().pack_command(*args)

    import hiredis

    plain = HiredisPacker(hiredis.pack_command, Counting())
    packed = b"*4\r\n$7\r\nEVALSHA\r\n$1\r\nx\r\n$1\r\n0\r\n$8\r\nschedule\r\n"
    assert plain.pack("EVALSHA", "x", 0, Reason.SCHEDULE) == [packed]
    assert Counting.calls == 0
    plain.pack("CONFIG GET", "maxmemory")
    assert Counting.calls == 1


def test_a_bool_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(redis.exceptions.DataError):
        packer().pack("SET", "key", True)


def test_no_packer_when_the_caller_chooses_an_encoding_or_a_packer() -> None:
    assert command_packer(redis, {"encoding": "latin-1"}) is None
    assert command_packer(redis, {"command_packer": object()}) is None
    assert command_packer(redis, {"socket_timeout": 1.0}) is not None


def test_a_store_on_one_server_packs_with_it_and_its_calls_work(redis_like: Backend) -> None:  # noqa: F811
    store = redis_like.open()
    try:
        assert isinstance(store, RedisStore)
        connection = store.client.connection_pool.get_connection()
        try:
            assert isinstance(connection._command_packer, HiredisPacker)
        finally:
            store.client.connection_pool.release(connection)
        slot = store.now_ms() - 1_000
        won = store.claim("packed ✓", slot, runner="r1", lease_ms=30_000)
        assert won.outcome == "won" and won.run is not None
        assert store.get_run("packed ✓", slot) == won.run
    finally:
        store.close()
