"""How a :class:`~leasecron.stores.redis.RedisStore` calls its server: :class:`RedisCalls`.

One command, one script on one job's keys, one script for many jobs in one pipeline (one round
trip, one per node of a cluster, each call atomic on its own), the index of open requests, the
changelog of stored schedules (written with the job's own script in one ``MULTI``/``EXEC``, but
on a cluster), a poll of both in one pipeline, the names in a set each read with a pipeline
of plain commands, and a whole store's overview in two pipelines. The one idea: every redis-py
error leaves here as a :class:`~leasecron.StoreError` (or :class:`~leasecron.StoreUnavailable`)
that names what was being done; and a write the store's replicas did not confirm in time is
never answered (rule 22).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from ..errors import StoreUnavailable
from ..stored import Overview, overview_names
from .redis_replies import read_changes, read_job_overview, text
from .redis_scripts import ScriptCall, Wait, changelog_keys, instances_keys, load_scripts, run_scripts, schedule_key
from .redis_server import store_error

__all__ = ["RedisCalls"]


class RedisCalls:
    """The calls a store makes with the redis-py ``client`` on the keys that start with ``prefix``.

    ``redis`` is the redis-py module (an optional extra, imported by the store when it is made).
    A write waits until ``replicas`` replicas hold it, for at most ``replica_wait_ms``.
    """

    def __init__(self, redis: Any, client: Any, prefix: str, replicas: int = 0, replica_wait_ms: int = 500) -> None:
        self._redis = redis
        self._replicas = replicas
        self._wait_ms = replica_wait_ms
        #: The ``WAIT`` a write sends after it, or None when the store waits for no replica.
        self.wait: Wait = (replicas, replica_wait_ms) if replicas else None
        #: The redis-py client (``redis.Redis`` or ``redis.cluster.RedisCluster``).
        self.client = client
        #: What every key starts with.
        self.prefix = prefix
        #: The store's scripts, by name (``redis_scripts.load_scripts``).
        self.scripts = load_scripts()
        #: The index of open requests, which index.lua keeps.
        self.pending_key = f"{prefix}:pending"
        #: The changelog of stored schedules, which changes.lua keeps.
        self.changelog_keys = changelog_keys(prefix)
        #: The instances' announcements, which instances.lua keeps.
        self.instances_keys = instances_keys(prefix)
        #: Whether the client is a Cluster's: the changelog then lies on another node than a job's keys.
        self.cluster = isinstance(client, redis.RedisCluster)

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

    def write(self, name: str, job: str, *args: Union[str, int]) -> Tuple[Any, Optional[int]]:
        """:meth:`script`, followed in the same round trip by a ``WAIT`` for the store's replicas:
        the reply, and how many replicas confirmed (None when the store waits for none; then the
        call is :meth:`script`'s). The caller tells :meth:`confirm` whether the reply wrote."""
        if self.wait is None:
            return self.script(name, job, *args), None
        replies, acks = self.script_many(name, [job], [args], f"{name} of {job!r}", wait=self.wait)
        return replies[0], acks

    def confirm(self, acks: Optional[int], wrote: bool, doing: str) -> None:
        """Rule 22: raise :class:`~leasecron.StoreUnavailable` when a reply that ``wrote`` was
        confirmed by fewer replicas than the store waits for: its answer must not be used."""
        if wrote and acks is not None and acks < self._replicas:
            raise StoreUnavailable(
                f"Redis {doing}: the write reached {acks} of the {self._replicas} replicas it waits for within"
                f" replica_wait_ms ({self._wait_ms} ms); its answer is not used (a failover could lose it)"
            )

    def index(self, doing: str, *args: Union[str, int], write: bool = False) -> Any:
        """index.lua on the index of open requests; a ``write`` waits for the replicas (rule 22)."""
        return self._outside_jobs("index", [self.pending_key], doing, args, write)

    def changelog(self, doing: str, *args: Union[str, int], write: bool = False) -> Any:
        """changes.lua on the changelog of stored schedules; a ``write`` waits for the replicas (rule 22)."""
        return self._outside_jobs("changes", list(self.changelog_keys), doing, args, write)

    def instances(self, doing: str, *args: Union[str, int]) -> Any:
        """instances.lua on the instances' announcements (no rule reads them: no replica is waited for)."""
        return self._outside_jobs("instances", list(self.instances_keys), doing, args, False)

    def _outside_jobs(
        self, name: str, keys: List[str], doing: str, args: Sequence[Union[str, int]], write: bool
    ) -> Any:
        script = self.scripts[name]
        if not write or self.wait is None:
            return self.call(doing, script, self.client, keys, args)
        (reply,), acks = self.at_once(doing, [(script, keys, args)], self.wait)
        self.confirm(acks, True, doing)
        return reply

    def at_once(
        self, doing: str, calls: Sequence[ScriptCall], wait: Wait = None, transaction: bool = False
    ) -> Tuple[List[Any], Optional[int]]:
        """:func:`~leasecron.stores.redis_scripts.run_scripts`: ``calls`` in one round trip (one per
        node of a cluster), with ``transaction`` in one ``MULTI``/``EXEC``; the replies, and with
        ``wait`` how many replicas confirmed them. A call the server refused raises."""
        replies, acks = self.call(doing, run_scripts, self.client, calls, wait, transaction)
        for reply in replies:
            if isinstance(reply, Exception):
                raise store_error(self._redis, reply, doing) from reply
        return replies, acks

    def set_schedule(self, job: str, args: Sequence[str]) -> Any:
        """schedule.lua on ``job``'s keys with ``args``, then changes.lua adding the record it
        returns to the changelog; its reply (the record), once the replicas hold both (rule 22).

        Outside a cluster both go in one ``MULTI``/``EXEC`` (one round trip, atomic together):
        changes.lua reads the record from the job's schedule key. On a cluster they are two calls
        on two nodes, the second given the record, and sent only once the replicas hold the first
        (the changelog never lists a change a failover may lose): a failure between them leaves
        the change in the job's key, which fences claims (rule 23), and out of the changelog until
        the job's next change; the call raises, saying so."""
        doing = f"set_schedule of {job!r}"
        schedule, changes = self.scripts["schedule"], self.scripts["changes"]
        keys = schedule.job_keys(self.prefix, job)
        if not self.cluster:
            add = (changes, [*self.changelog_keys, schedule_key(self.prefix, job)], ("add", job))
            (record, _), acks = self.at_once(doing, [(schedule, keys, args), add], self.wait, transaction=True)
            self.confirm(acks, True, doing)
            return record
        (record,), acks = self.at_once(doing, [(schedule, keys, args)], self.wait)
        self.confirm(acks, True, doing)
        doing = (
            f"adding the schedule of {job!r} to the changelog (it is stored, and claims from an older version are"
            " answered stale, but instances learn of it only from them: set it again)"
        )
        self.changelog(doing, "add", job, *(text(part) for part in record), write=True)
        return record

    def poll(self, since: int, announce: Sequence[Union[str, int]] = ()) -> Tuple[Any, Any]:
        """index.lua's and changes.lua's reads in one pipeline (one round trip, one per node of a
        cluster): the open requests, and the changes after cursor ``since``; with ``announce``,
        instances.lua's arguments, that announcement refreshed in the same pipeline."""
        index, changes = self.scripts["index"], self.scripts["changes"]
        calls: List[ScriptCall] = [
            (index, [self.pending_key], ("read",)),
            (changes, self.changelog_keys, ("read", since)),
        ]
        if announce:
            calls.append((self.scripts["instances"], self.instances_keys, announce))
        replies, _ = self.at_once("polling the requests and the schedule changes", calls)
        return replies[0], replies[1]

    def script_many(
        self, name: str, jobs: Sequence[str], args: Sequence[Sequence[Union[str, int]]], doing: str, wait: Wait = None
    ) -> Tuple[List[Any], Optional[int]]:
        """The script ``name`` once per job of ``jobs``, with the ``args`` of the same index, in one
        pipeline (:meth:`Script.many <leasecron.stores.redis_scripts.Script.many>`: one round trip,
        one per node of a cluster, each call atomic on its own); the replies in order, and with
        ``wait`` how many replicas confirmed them (else None). A call the server refused raises,
        naming its job."""
        script = self.scripts[name]
        calls = [(script.job_keys(self.prefix, job), job_args) for job, job_args in zip(jobs, args)]
        replies, acks = self.call(doing, script.many, self.client, calls, wait)
        for job, reply in zip(jobs, replies):
            if isinstance(reply, Exception):
                raise store_error(self._redis, reply, f"{name} of {job!r}") from reply
        return replies, acks

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

    def overview(self, controlled_key: str, jobs: List[str]) -> Overview:
        """:meth:`~leasecron.Store.overview` of ``jobs`` in two round trips (one per node of a
        cluster each): the server's clock, changes.lua's read of every stored schedule and the
        names in ``controlled_key`` (the jobs ever paused or asked to run) in one pipeline; then
        overview.lua for each job to summarise and each of those names (is it paused?) in
        another, each call atomic on its own (the jobs are read moments apart, as a pipeline of
        reads of one job each is)."""
        doing = "reading the overview of the jobs"
        clock, changes, controlled = self._overview_start(controlled_key, doing)
        schedules = {record.job: record for record in read_changes(0, changes).changes}
        names = overview_names(jobs, schedules.values())
        every = list(dict.fromkeys([*names, *sorted(text(name) for name in controlled)]))
        replies = self.script_many("overview", every, [()] * len(every), doing)[0] if every else []
        read = {job: read_job_overview(job, reply) for job, reply in zip(every, replies)}
        now = int(clock[0]) * 1000 + int(clock[1]) // 1000
        paused = frozenset(job for job, (is_paused, _) in read.items() if is_paused)
        return Overview(now, paused, schedules, {job: read[job][1] for job in names})

    def _overview_start(self, controlled_key: str, doing: str) -> Tuple[Any, Any, Any]:
        """``TIME``, changes.lua's ``read`` from cursor 0 and ``SMEMBERS controlled_key`` in one
        pipeline (on a cluster the clock is that of the changelog's node); changes.lua sent again
        once loaded if the server had lost it."""
        changes = self.scripts["changes"]
        node = self.client.get_node_from_key(self.changelog_keys[0]) if self.cluster else None

        def read() -> List[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.execute_command("TIME", **({"target_nodes": node} if node is not None else {}))
            pipe.execute_command("EVALSHA", changes.sha, len(self.changelog_keys), *self.changelog_keys, "read", 0)
            pipe.smembers(controlled_key)
            return list(pipe.execute(raise_on_error=False))

        replies = self.call(doing, read)
        if isinstance(replies[1], self._redis.exceptions.NoScriptError):
            replies[1] = self.changelog(doing, "read", 0)  # loads it again
        for reply in replies:
            if isinstance(reply, Exception):
                raise store_error(self._redis, reply, doing) from reply
        return replies[0], replies[1], replies[2]
