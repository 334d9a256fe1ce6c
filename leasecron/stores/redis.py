"""RedisStore: the store contract on Redis or Valkey, standalone or cluster.

Each operation that writes is one Lua script of ``stores/lua/`` run with one ``EVALSHA``: the
script reads the server's clock with ``TIME``, decides and writes atomically, so no decision
spans two round trips. One job's state is six keys in one hash tag (a cluster keeps them on one
slot); the three keys of the whole store (``jobs``, ``controlled``, ``pending``) live on other
slots, and the store writes them in calls of their own, ordered so that a crash between two calls
leaves nothing harmful. ``docs/design.rst`` (The stores) lays out the keys and that order;
:class:`~leasecron.stores.redis_calls.RedisCalls` makes the calls.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ..compat import old_names_of
from ..controls import JobState, ManualRequest
from ..errors import ConfigError, StoreError
from ..runs import Claim, Run
from ..states import RequestState
from . import require
from .claim_request import ClaimRequest
from .base import Store
from .redis_calls import RedisCalls
from .redis_server import durability_warnings, server_version, store_error as _store_error
from .redis_scripts import (
    claim_args, control_keys, index_member, job_keys, read_claim, read_index, read_run, read_runs, read_state, text,
)  # fmt: skip
from .urls import masked_url, without_secrets

__all__ = ["RedisStore", "job_keys", "control_keys"]

log = logging.getLogger("leasecron")

#: URL schemes this store opens, and the redis-py scheme each one means.
URL_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}

#: Timeouts (seconds) of the clients the store creates; a URL may set others.
DEFAULT_SOCKET_TIMEOUT = 5.0
DEFAULT_CONNECT_TIMEOUT = 2.0
#: Connections of a client the store creates (per node of a cluster); more calls wait for one.
DEFAULT_MAX_CONNECTIONS = 64


class RedisStore(Store):
    """The store contract on Redis or Valkey (``redis://``, ``rediss://``,
    ``valkey://``, ``valkeys://``).

    ``client`` is a redis-py client: ``redis.Redis`` or
    ``redis.cluster.RedisCluster``. A store made with :meth:`from_url` owns
    its client and closes it in :meth:`close`; a client passed in stays the
    caller's to close. ``prefix`` starts every key, so several applications
    can share one server; it must not contain ``{`` or ``}`` (they would
    change the keys' hash tag).

    ``create`` is accepted for the signature every store shares
    (:func:`~leasecron.open_store`'s ``create=False``): a Redis store has
    nothing to create before it is read (reads write no key).
    """

    kind = "redis"

    def __init__(self, client: Any, *, prefix: str = "leasecron", create: bool = True) -> None:
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ConfigError(f"Redis key prefix must be a non-empty string without braces, not {prefix!r}")
        if client is None or not hasattr(client, "evalsha"):
            raise ConfigError(f"RedisStore needs a redis-py client (redis.Redis or RedisCluster), not {client!r}")
        self._redis = require("redis", extra="redis", store="RedisStore")
        self.client = client
        self.prefix = prefix
        self.create = create
        self._calls = RedisCalls(self._redis, client, prefix)
        self._jobs_key = f"{prefix}:jobs"
        self._controlled_key = f"{prefix}:controlled"
        self._registered: Set[str] = set()
        self._lock = threading.Lock()
        self._owns_client = False
        self._label = f"{type(client).__name__}"

    @classmethod
    def from_url(cls, url: str, *, create: bool = True, **client_options: Any) -> "RedisStore":
        """Open ``redis://[user:password@]host[:port][/db]`` (or ``rediss://``,
        ``valkey://``, ``valkeys://``).

        Query options: ``prefix`` (default ``leasecron``); ``cluster=true``
        for a Redis/Valkey Cluster (the URL names any one node); and any
        option redis-py's ``from_url`` knows, such as ``socket_timeout``.
        ``create``: as the constructor's.
        """
        redis = require("redis", extra="redis", store="RedisStore")
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        shown = masked_url(url)
        if scheme not in URL_SCHEMES:
            raise ConfigError(f"RedisStore URL must start with one of {', '.join(URL_SCHEMES)}, not {shown!r}")
        database = parts.path.strip("/")
        if database and not database.isdigit():  # redis-py would quietly use database 0
            raise ConfigError(
                f"bad Redis URL {shown!r}: the database must be a number (redis://host:6379/0),"
                f" not {without_secrets(database, url)!r}"
            )
        query = parse_qs(parts.query, keep_blank_values=True)
        prefix = query.pop("prefix", ["leasecron"])[-1]
        cluster = query.pop("cluster", ["false"])[-1].lower()
        if cluster not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"cluster in {shown!r} must be true or false, not {cluster!r}")
        target = urlunsplit((URL_SCHEMES[scheme], parts.netloc, parts.path, urlencode(query, doseq=True), ""))
        options: Dict[str, Any] = {
            "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
            "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
            "connection_pool_class": redis.BlockingConnectionPool,
            "max_connections": DEFAULT_MAX_CONNECTIONS,
        }
        options.update(client_options)
        # the wait for a free connection: as long as a call may take, the URL's socket_timeout if it has one
        wait = query.get("socket_timeout", [""])[-1]
        options.setdefault("timeout", float(wait) if wait.replace(".", "", 1).isdigit() else options["socket_timeout"])
        try:
            if cluster in ("true", "1", "yes"):
                client = redis.cluster.RedisCluster.from_url(target, **options)
            else:
                options.setdefault("retry", redis.retry.Retry(redis.backoff.NoBackoff(), 0))
                pool = options.pop("connection_pool_class").from_url(target, **options)  # Redis.from_url takes no class
                client = redis.Redis.from_pool(pool)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad Redis URL {shown!r}: {without_secrets(str(exc), url)}") from exc
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            # RedisClusterException (no node answers as a cluster node) is no RedisError
            error = _store_error(redis, exc, f"cannot connect to {shown}")
            raise type(error)(without_secrets(str(error), url)) from exc
        store = cls(client, prefix=prefix, create=create)
        store.kind = "valkey" if scheme.startswith("valkey") else "redis"
        store._owns_client = True
        store._label = shown
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
        return self._answers([request], [self._calls.script("claim", request.job, *claim_args(request))])[0]

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """One pipeline of claim.lua calls: one round trip, one per node of a cluster."""
        self._register(list(dict.fromkeys(request.job for request in requests)))
        jobs, args = [request.job for request in requests], [claim_args(request) for request in requests]
        return self._answers(requests, self._calls.script_many("claim", jobs, args, f"claims of {len(requests)} jobs"))

    def _answers(self, requests: List[ClaimRequest], replies: List[Any]) -> List[Claim]:
        """The claims claim.lua answered, once the jobs set and the index of requests know what
        they wrote (``docs/design.rst``, The stores: Redis)."""
        answers, firsts = [], []
        for request, reply in zip(requests, replies):
            claim, first, requested_by, state = read_claim(request.job, reply)
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
        return bool(self._calls.script("heartbeat", job, slot_ms, token, lease_ms))

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        args: Tuple[Union[str, int], ...] = (slot_ms, token, status)
        if error is not None:
            args += (error,)
        return bool(self._calls.script("finish", job, *args))

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return bool(self._calls.script("release", job, slot_ms, token))

    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        self._calls.call(f"registering job {job!r}", self.client.sadd, self._controlled_key, job)
        args: Tuple[str, ...] = ("pause", by) if note is None else ("pause", by, note)
        return read_state(job, self._calls.script("pause", job, *args))

    def _resume(self, job: str, by: str) -> JobState:
        return read_state(job, self._calls.script("pause", job, "resume", by))

    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        self._calls.call(f"registering job {job!r}", self.client.sadd, self._controlled_key, job)
        slot, expires = (int(text(value)) for value in self._calls.script("request", job, by, max_late_ms))
        doing = (
            f"indexing the request of {job!r} at {slot} (it is stored, but no instance will find it:"
            " it expires without a run; ask again)"
        )
        self._calls.index(doing, "add", index_member(job, slot, by), expires)
        return ManualRequest(job, slot, by, expires, RequestState.PENDING)

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
        replies = self._calls.script_many("runs", jobs, [("runs", limit)] * len(jobs), doing)
        return {job: read_runs(job, reply) for job, reply in zip(jobs, replies)}

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
        return durability_warnings(info, appendfsync)

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
