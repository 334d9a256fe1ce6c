"""RedisStore: the store contract on Redis or Valkey, standalone or cluster.

Each operation that writes is one Lua script of ``stores/lua/`` run with one ``EVALSHA``: the
script reads the server's clock with ``TIME``, decides and writes atomically, so no decision
spans two round trips. One job's state is seven keys in one hash tag (a cluster keeps them on one
slot); the keys of the whole store (``jobs``, ``controlled``, ``pending``, and the changelog of
stored schedules) live on other slots, and the store writes them in calls of their own, ordered
so that a crash between two calls leaves nothing harmful. ``docs/design.rst`` (The stores) lays
out the keys and that order; :class:`~leasecron.stores.redis_calls.RedisCalls` makes the calls.

Stored schedules (rules 23 and 24): the truth of a job's schedule is its ``schedule`` key, in the
job's hash tag, so claim.lua checks a claim's version against it in the claim's own script (one
``HGET``, no round trip more). ``set_schedule`` raises the version there (schedule.lua), then
adds the record to the changelog (changes.lua: a counter that is the cursor, the jobs by the
cursor of their newest change, their records), whose keys share a hash tag of their own, as the
index of requests (index.lua) lives outside every job's. Outside a cluster both scripts go in one
``MULTI``/``EXEC``: one round trip, atomic together. On a cluster they are two calls on two
slots: the job's key is the truth for fencing, so an instance that misses a change (a crash
between the calls, or a change reaching the changelog after a newer one, which it keeps) has its
claims from the old version answered ``stale`` and reads the job's ``stored_schedule`` again.
``poll`` reads the index and the changelog in one pipeline (one round trip, one per node of a
cluster). A keyspace of 0.2 has no ``schedule`` key: every job reads as version 0, unchanged.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from ..compat import old_names_of
from ..announcements import Announcement, LiveInstance
from ..controls import JobState, ManualRequest
from ..errors import ConfigError, StoreError
from ..limits import check_int
from ..runs import Claim, Run
from ..states import RequestState
from ..stored import Overview, Poll, ScheduleChanges, StoredSchedule
from . import require
from .claim_request import ClaimRequest
from .base import Finish, Store
from .redis_calls import RedisCalls
from .redis_clients import DEFAULT_REPLICA_WAIT_MS, open_client
from .redis_server import durability_warnings, replication_lines, server_version
from .redis_replies import (
    claim_args, index_member, read_changes, read_claim, read_index, read_instances, read_run, read_runs,
    read_schedule, read_state, schedule_args, text,
)  # fmt: skip
from .redis_scripts import changelog_keys, control_keys, job_keys, schedule_key

__all__ = ["RedisStore", "job_keys", "control_keys", "schedule_key", "changelog_keys"]

log = logging.getLogger("leasecron")


class RedisStore(Store):
    """The store contract on Redis or Valkey (``redis://``, ``rediss://``,
    ``valkey://``, ``valkeys://``, ``redis+sentinel://``, ``valkey+sentinel://``).

    ``client`` is a redis-py client: ``redis.Redis`` or
    ``redis.cluster.RedisCluster``. A store made with :meth:`from_url` owns
    its client and closes it in :meth:`close`; a client passed in stays the
    caller's to close. ``prefix`` starts every key, so several applications
    can share one server; it must not contain ``{`` or ``}`` (they would
    change the keys' hash tag).

    ``replicas`` (default 0): each write is answered only once that many
    replicas hold it (``WAIT``, in the same round trip as the write; on a
    Cluster, the replicas of the node that holds the job); when fewer confirm
    within ``replica_wait_ms`` the call raises
    :class:`~leasecron.StoreUnavailable` (rule 22 of the contract).

    ``create`` is accepted for the signature every store shares
    (:func:`~leasecron.open_store`'s ``create=False``): a Redis store has
    nothing to create before it is read (reads write no key).
    """

    kind = "redis"

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "leasecron",
        create: bool = True,
        replicas: int = 0,
        replica_wait_ms: int = DEFAULT_REPLICA_WAIT_MS,
    ) -> None:
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ConfigError(f"Redis key prefix must be a non-empty string without braces, not {prefix!r}")
        if client is None or not hasattr(client, "evalsha"):
            raise ConfigError(f"RedisStore needs a redis-py client (redis.Redis or RedisCluster), not {client!r}")
        check_int("replicas", replicas, 0)
        check_int("replica_wait_ms", replica_wait_ms, 1)
        self._redis = require("redis", extra="redis", store="RedisStore")
        self.client = client
        self.prefix = prefix
        self.create = create
        #: How many replicas must hold each write before the store answers it (rule 22).
        self.replicas = replicas
        #: How long a write waits for them, in ms.
        self.replica_wait_ms = replica_wait_ms
        self._calls = RedisCalls(self._redis, client, prefix, replicas, replica_wait_ms)
        self._jobs_key = f"{prefix}:jobs"
        self._controlled_key = f"{prefix}:controlled"
        self._registered: Set[str] = set()
        self._lock = threading.Lock()
        self._owns_client = False
        self._label = f"{type(client).__name__}"

    @classmethod
    def from_url(cls, url: str, *, create: bool = True, **client_options: Any) -> "RedisStore":
        """Open ``redis://[user:password@]host[:port][/db]`` (or ``rediss://``, ``valkey://``,
        ``valkeys://``), or a primary through Sentinel:
        ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]`` (or
        ``valkey+sentinel://``).

        Query options: ``prefix`` (default ``leasecron``); ``replicas`` and ``replica_wait_ms``
        (as the constructor's); ``cluster=true`` for a Redis/Valkey Cluster (the URL names any
        one node); ``sentinel_password`` for the Sentinels (the URL's user and password are the
        data servers'); and, but for a Sentinel URL, any option redis-py's ``from_url`` knows,
        such as ``socket_timeout``. ``create``: as the constructor's.
        """
        redis = require("redis", extra="redis", store="RedisStore")
        opened = open_client(redis, url, client_options)
        store = cls(
            opened.client, prefix=opened.prefix, create=create, replicas=opened.replicas,
            replica_wait_ms=opened.replica_wait_ms,
        )  # fmt: skip
        store.kind = opened.kind
        store._owns_client = True
        store._label = opened.label
        return store

    def _register(self, jobs: Sequence[str], again: bool = False) -> None:
        """Add ``jobs`` to the jobs set, in one call: those this process has not added yet, or
        all of them ``again`` (their first run was stored)."""
        new = list(jobs) if again else [job for job in jobs if job not in self._registered]
        if new:
            doing = f"registering job {new[0]!r}" + ("" if len(new) == 1 else f" and {len(new) - 1} more")
            self._calls.call(doing, self.client.sadd, self._jobs_key, *new)
            with self._lock:
                self._registered.update(new)

    # -- the contract's writes (arguments checked by Store) ------------------------------

    def _claim(self, request: ClaimRequest) -> Claim:
        self._register((request.job,))
        reply, acks = self._calls.write("claim", request.job, *claim_args(request))
        return self._answers([request], [reply], acks, f"claim of {request.job!r}")[0]

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """One pipeline of claim.lua calls: one round trip, one per node of a cluster."""
        self._register(list(dict.fromkeys(request.job for request in requests)))
        jobs, args = [request.job for request in requests], [claim_args(request) for request in requests]
        doing = f"claims of {len(requests)} jobs"
        replies, acks = self._calls.script_many("claim", jobs, args, doing, wait=self._calls.wait)
        return self._answers(requests, replies, acks, doing)

    def _answers(
        self, requests: List[ClaimRequest], replies: List[Any], acks: Optional[int], doing: str
    ) -> List[Claim]:
        """The claims claim.lua answered, once the replicas hold what they wrote (rule 22) and the
        jobs set and the index of requests know it (``docs/design.rst``, The stores: Redis)."""
        read = [read_claim(request, reply) for request, reply in zip(requests, replies)]
        self._calls.confirm(acks, any(answer.wrote for answer in read), doing)
        answers, firsts = [], []
        for request, (claim, first, requested_by, state, _) in zip(requests, read):
            answers.append(claim)
            if first:  # the job's first stored run: make sure jobs() lists it
                firsts.append(request.job)
            if requested_by is not None:  # the request at the slot is no longer pending
                self._reindex(request.job, request.slot_ms, requested_by, state)
        if firsts:
            try:
                self._register(firsts, again=True)
            except StoreError as exc:  # the claims stand; this process registers before its next claim
                with self._lock:
                    self._registered.difference_update(firsts)
                log.warning("leasecron: could not add %s to %s (%s); will retry", firsts, self._jobs_key, exc)
        return answers

    def _reindex(self, job: str, slot_ms: int, requested_by: str, state: str) -> None:
        """Mark a request claimed in the index of open requests (it stays there until it expires),
        or take a skipped or expired one out; a failure leaves the entry as it was until it expires
        or a manual claim meets it again (``docs/design.rst``, The stores: Redis)."""
        member = index_member(job, slot_ms, requested_by)
        try:
            if state == RequestState.CLAIMED:
                self._calls.index(f"marking the request of {job!r} at {slot_ms} claimed in the index", "claim",
                                  member, index_member(job, slot_ms, requested_by, claimed=True))  # fmt: skip
            else:
                self._calls.index(f"removing the request of {job!r} at {slot_ms} from the index", "remove", member)
        except StoreError as exc:  # the claim stands
            log.warning("leasecron: %s", exc)

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        return bool(self._confirmed("heartbeat", job, slot_ms, token, lease_ms))

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        args: Tuple[Union[str, int], ...] = (slot_ms, token, status)
        if error is not None:
            args += (error,)
        return bool(self._confirmed("finish", job, *args))

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """Rule 25: one call of finish_many.lua with every finish (one round trip), or on a cluster
        one pipeline of finish.lua calls (one round trip per node: the jobs' keys lie on several)."""
        doing = f"finishes of {len(finishes)} runs"
        if self._calls.cluster:
            jobs = [finish.job for finish in finishes]
            args: List[Tuple[Union[str, int], ...]] = [
                (f.slot_ms, f.token, f.status) if f.error is None else (f.slot_ms, f.token, f.status, f.error)
                for f in finishes
            ]
            replies, acks = self._calls.script_many("finish", jobs, args, doing, wait=self._calls.wait)
        else:
            script = self._calls.scripts["finish_many"]
            keys = [key for finish in finishes for key in script.job_keys(self.prefix, finish.job)]
            flat: List[Union[str, int]] = []
            for f in finishes:
                flat += (f.slot_ms, f.token, f.status, "0" if f.error is None else "1", f.error or "")
            (replies,), acks = self._calls.at_once(doing, [(script, keys, flat)], self._calls.wait)
        answers = [bool(reply) for reply in replies]
        self._calls.confirm(acks, any(answers), doing)
        return answers

    def _record_return(
        self, job: str, slot_ms: int, attempt: int, runner: str, returned_ms: int, status: str, error: Optional[str]
    ) -> bool:
        args: Tuple[Union[str, int], ...] = (slot_ms, attempt, runner, returned_ms, status)
        return bool(self._confirmed("record_return", job, *(args if error is None else args + (error,))))

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return bool(self._confirmed("release", job, slot_ms, token))

    def _confirmed(self, name: str, job: str, *args: Union[str, int], always: bool = False) -> Any:
        """The reply of the script ``name``, once the replicas hold what it wrote (rule 22): it wrote
        when its reply is true (a renewal, a finish, a release), or ``always`` (the controls)."""
        reply, acks = self._calls.write(name, job, *args)
        self._calls.confirm(acks, always or bool(reply), f"{name} of {job!r}")
        return reply

    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        self._calls.call(f"registering job {job!r}", self.client.sadd, self._controlled_key, job)
        args: Tuple[str, ...] = ("pause", by) if note is None else ("pause", by, note)
        return read_state(job, self._confirmed("pause", job, *args, always=True))

    def _resume(self, job: str, by: str) -> JobState:
        return read_state(job, self._confirmed("pause", job, "resume", by, always=True))

    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        self._calls.call(f"registering job {job!r}", self.client.sadd, self._controlled_key, job)
        slot, expires = (int(text(value)) for value in self._confirmed("request", job, by, max_late_ms, always=True))
        doing = (
            f"indexing the request of {job!r} at {slot} (it is stored, but no instance will find it:"
            " it expires without a run; ask again)"
        )
        self._calls.index(doing, "add", index_member(job, slot, by), expires, write=True)
        return ManualRequest(job, slot, by, expires, RequestState.PENDING)

    def _set_schedule(
        self,
        job: str,
        by: str,
        source: str,
        schedule: Optional[str],
        tz: Optional[str],
        task: Optional[str],
        kwargs: Dict[str, Any],
        options: Dict[str, Any],
    ) -> StoredSchedule:
        """schedule.lua (rule 24) and the changelog's change, in one round trip but on a cluster
        (:meth:`RedisCalls.set_schedule <leasecron.stores.redis_calls.RedisCalls.set_schedule>`)."""
        args = schedule_args(by, source, schedule, tz, task, kwargs, options)
        return read_schedule(job, self._calls.set_schedule(job, args))

    # -- the contract's reads (arguments checked by StoreReads) --------------------------

    def now_ms(self) -> int:
        seconds, micros = self._calls.call("reading the server's clock", self.client.time)
        return int(seconds) * 1000 + int(micros) // 1000

    def _job_state(self, job: str) -> JobState:
        return read_state(job, self._calls.script("state", job))

    def _job_states(self) -> List[JobState]:
        def queue(pipe: Any, name: str) -> None:
            paused, requests = control_keys(self.prefix, name)
            pipe.hmget(paused, "by", "ms", "note")
            pipe.hgetall(requests)

        now = self.now_ms()  # the states are judged at one clock
        states = []
        for name, (pause, requests) in self._calls.each_member(self._controlled_key, "reading job states", queue):
            state = read_state(name, [now, *pause, *(part for pair in requests.items() for part in pair)])
            if state.paused or state.requests:
                states.append(state)
        return states

    def _pending_requests(self) -> List[ManualRequest]:
        return read_index(self._calls.index("reading the pending requests", "read"))

    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        key = schedule_key(self.prefix, job)
        fields = self._calls.call(f"reading the schedule of {job!r}", self.client.hgetall, key)
        return read_schedule(job, fields) if fields else None

    def _schedule_changes(self, since: int) -> ScheduleChanges:
        return read_changes(since, self._calls.changelog("reading the schedule changes", "read", since))

    def _poll(self, since: int) -> Poll:
        """index.lua's and changes.lua's reads in one pipeline: one round trip, one per node of a cluster."""
        requests, changes = self._calls.poll(since)
        return Poll(read_index(requests), read_changes(since, changes))

    def _poll_announcing(self, since: int, announce: Announcement) -> Poll:
        """:meth:`_poll` and instances.lua's ``announce`` in the same pipeline."""
        requests, changes = self._calls.poll(since, self._announce_args(announce))
        return Poll(read_index(requests), read_changes(since, changes))

    def _announce_args(self, announcement: Announcement) -> Tuple[Union[str, int], ...]:
        return ("announce", self.instance_ttl_ms, announcement.runner, announcement.to_json())

    def _announce(self, announcement: Announcement) -> None:
        self._calls.instances(f"announcing instance {announcement.runner!r}", *self._announce_args(announcement))

    def _withdraw(self, runner: str) -> None:
        self._calls.instances(f"withdrawing instance {runner!r}", "withdraw", runner)

    def _instances(self) -> List[LiveInstance]:
        return read_instances(self._calls.instances("reading the instances", "read", self.instance_ttl_ms))

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        raw = self._calls.call(f"reading {job!r}", self.client.hget, job_keys(self.prefix, job)[0], str(slot_ms))
        return None if raw is None else read_run(job, str(slot_ms), raw)

    def _unfinished(self, job: str) -> List[Run]:
        return read_runs(job, self._calls.script("runs", job, "unfinished", 0))

    def _runs(self, job: str, limit: int) -> List[Run]:
        return read_runs(job, self._calls.script("runs", job, "runs", limit))

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        """One pipeline of runs.lua calls, one per job: one round trip, one per node of a cluster."""
        doing = f"reading the runs of {len(jobs)} jobs"
        replies, _ = self._calls.script_many("runs", jobs, [("runs", limit)] * len(jobs), doing)
        return {job: read_runs(job, reply) for job, reply in zip(jobs, replies)}

    def _overview(self, jobs: List[str]) -> Overview:
        """Two round trips, one per node of a cluster each (:meth:`RedisCalls.overview
        <leasecron.stores.redis_calls.RedisCalls.overview>`: overview.lua once per job)."""
        return self._calls.overview(self._controlled_key, jobs)

    def _jobs(self) -> List[str]:
        def queue(pipe: Any, name: str) -> None:
            pipe.exists(job_keys(self.prefix, name)[1])

        return [name for name, (found,) in self._calls.each_member(self._jobs_key, "listing jobs", queue) if found]

    # -- for leasecron check, and the end ------------------------------------------------

    def server_version(self) -> str:
        """The server's kind and version, for example ``Valkey 9.1.2`` or ``Redis 7.0.15``."""
        return server_version(self._calls.call("reading INFO server", self.client.info, "server"))

    def durability_warnings(self) -> List[str]:
        """Warn when the server does not log every write to its append-only file."""

        def appendfsync() -> Any:
            try:
                return self.client.config_get("appendfsync")
            except self._redis.exceptions.RedisError:
                return None  # CONFIG may be disabled (managed servers)

        info = self._calls.call("reading INFO persistence", self.client.info, "persistence")
        return durability_warnings(info, appendfsync) + self._replication()[1]

    def replication(self) -> List[str]:
        """The primary (or each primary of a cluster), its replicas with their state and lag, and
        whether ``replicas=N`` can be met now."""
        return self._replication()[0]

    def _replication(self) -> Tuple[List[str], List[str]]:
        info = self._calls.call("reading INFO replication", self.client.info, "replication")
        lines, warnings = replication_lines(info, self.replicas)
        pool: Any = getattr(self.client, "connection_pool", None)
        service = getattr(pool, "service_name", None)
        if service is not None:  # found through Sentinel: name the primary the Sentinels name now
            host, port = self._calls.call("asking the Sentinels", pool.get_master_address)
            lines.insert(0, f"Sentinel service {service!r}: primary {host}:{port}")
        return lines, warnings

    def close(self) -> None:
        """Close the client if this store created it (from a URL)."""
        if self._owns_client:
            try:
                self.client.close()
            except self._redis.exceptions.RedisError:
                pass

    def __repr__(self) -> str:
        return f"RedisStore({self._label!r}, prefix={self.prefix!r})"


__getattr__ = old_names_of(__name__)
