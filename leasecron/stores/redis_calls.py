"""How a :class:`~leasecron.stores.redis.RedisStore` calls its server: :class:`RedisCalls`.

One command, one script on one job's keys, one script for many jobs in one pipeline (one round
trip, one per node of a cluster, each call atomic on its own), the index of open requests, and
the names in a set each read with a pipeline of plain commands. The one idea: every redis-py
error leaves here as a :class:`~leasecron.StoreError` (or :class:`~leasecron.StoreUnavailable`)
that names what was being done.
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple, Union

from .redis_scripts import load_scripts, text
from .redis_server import store_error

__all__ = ["RedisCalls"]


class RedisCalls:
    """The calls a store makes with the redis-py ``client`` on the keys that start with ``prefix``.

    ``redis`` is the redis-py module (an optional extra, imported by the store when it is made).
    """

    def __init__(self, redis: Any, client: Any, prefix: str) -> None:
        self._redis = redis
        #: The redis-py client (``redis.Redis`` or ``redis.cluster.RedisCluster``).
        self.client = client
        #: What every key starts with.
        self.prefix = prefix
        #: The store's scripts, by name (``redis_scripts.load_scripts``).
        self.scripts = load_scripts()
        #: The index of open requests, which index.lua keeps.
        self.pending_key = f"{prefix}:pending"

    def call(self, doing: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, a redis-py error raised as the store's error for ``doing``."""
        try:
            return fn(*args)
        except self._redis.exceptions.RedisError as exc:
            raise store_error(self._redis, exc, doing) from exc

    def script(self, name: str, job: str, *args: Union[str, int]) -> Any:
        """The script ``name`` on the keys of ``job`` with ``args``: one ``EVALSHA``."""
        script = self.scripts[name]
        try:  # as call, with the message made only on an error
            return script(self.client, script.job_keys(self.prefix, job), args)
        except self._redis.exceptions.RedisError as exc:
            raise store_error(self._redis, exc, f"{name} of {job!r}") from exc

    def index(self, doing: str, *args: Union[str, int]) -> Any:
        """index.lua on the index of open requests."""
        return self.call(doing, self.scripts["index"], self.client, [self.pending_key], args)

    def script_many(
        self, name: str, jobs: Sequence[str], args: Sequence[Sequence[Union[str, int]]], doing: str
    ) -> List[Any]:
        """The script ``name`` once per job of ``jobs``, with the ``args`` of the same index, in one
        pipeline (:meth:`Script.many <leasecron.stores.redis_scripts.Script.many>`: one round trip,
        one per node of a cluster, each call atomic on its own); the replies in order. A call the
        server refused raises, naming its job."""
        script = self.scripts[name]
        calls = [(script.job_keys(self.prefix, job), job_args) for job, job_args in zip(jobs, args)]
        replies: List[Any] = self.call(doing, script.many, self.client, calls)
        for job, reply in zip(jobs, replies):
            if isinstance(reply, Exception):
                raise store_error(self._redis, reply, f"{name} of {job!r}") from reply
        return replies

    def each_member(self, key: str, doing: str, queue: Callable[[Any, str], None]) -> List[Tuple[str, List[Any]]]:
        """The names in the set ``key``, sorted, each with the replies of the commands that
        ``queue(pipe, name)`` puts in one pipeline (a cluster's takes no script)."""
        names = sorted(text(m) for m in self.call(doing, self.client.smembers, key))
        if not names:
            return []

        def read() -> List[Any]:
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                queue(pipe, name)
            return list(pipe.execute())

        replies = self.call(doing, read)
        each = len(replies) // len(names)
        return [(name, replies[i * each : (i + 1) * each]) for i, name in enumerate(names)]
