"""RedisStore: the store contract on Redis or Valkey, standalone or cluster.

Each operation that writes is one Lua script (``stores/lua/<op>.lua``, with
``common.lua`` prepended, and the numbers of the protocol rendered in from
:mod:`leasecron.runs`), run with one ``EVALSHA``: the script reads the
server's clock with ``TIME`` and decides and writes atomically, so every
lease comparison uses the server's clock and no decision ever spans two
round trips. Each script tags its branches with the number of the rule of
the store contract they carry out. A script the server does not know (a restart, ``SCRIPT FLUSH``,
a failover) answers ``NOSCRIPT``; the store then loads it and calls again.
A batch of claims (``claim_many``, rule 21) is one pipeline of claim.lua
calls: one round trip, one per node of a cluster; each call is as atomic as a
single claim. ``recent_runs`` is one pipeline of runs.lua calls, likewise.
How the store calls the server, and the operations that only read, are
:class:`~leasecron.stores.redis_reads.RedisReads`, the base of the store.

Keys. One job's state lives in six keys that share one hash tag, so a
cluster keeps them on one slot and a script can touch them all::

    <prefix>:{<job>}:runs       hash  slot_ms -> the run, as JSON (with its attempts)
    <prefix>:{<job>}:slots      zset  every stored slot (score = slot_ms)
    <prefix>:{<job>}:running    zset  the running slots
    <prefix>:{<job>}:finished   zset  the finished slots
    <prefix>:{<job>}:paused     hash  by, ms, note: there while the job is paused
    <prefix>:{<job>}:requests   hash  slot_ms -> a request for a manual run, as JSON
    <prefix>:jobs               set   the names of jobs with runs (read by jobs())
    <prefix>:controlled         set   the names of jobs ever paused or asked to run
                                      (read by job_states())
    <prefix>:pending            zset  the open requests of every job (read by
                                      pending_requests()): member [job, slot_ms,
                                      requested_by] as JSON (pending), with a
                                      fourth item "claimed" once claimed;
                                      score expires_ms

``<job>`` is the job name percent-encoded (every byte outside
``A-Z a-z 0-9 . _ -``, ``%`` and the braces included), so no name can end
its hash tag early, reach into another job's keys, or collide with another
name. The sorted sets make ``unfinished``, ``runs``, history pruning and
``jobs`` reads of one job's keys: no ``KEYS`` or ``SCAN`` anywhere. A claim of a
slot without a run reads ``paused`` and ``requests`` only when one ``EXISTS``
of both finds either (most jobs have neither); a manual one reads its request.

The three keys without a hash tag live on other cluster slots than a job's
keys, so a job's script cannot write them; the store writes each in a call
of its own, ordered so that what a crash between the calls leaves behind is
harmless:

* ``jobs``: a store adds a job (``SADD``, idempotent) before its first claim
  of that job, and again after a claim that stored the job's first run (the
  server may have lost its data since: a restart without persistence, a
  failover); ``jobs()`` lists the members that have stored runs. That is one
  extra round trip per job and process, and per job whose history starts (a
  batch adds all its new jobs in one, and all whose history it started in one);
  every other claim, and every heartbeat, finish and release, is one
  ``EVALSHA``.
* ``controlled``: ``pause`` and ``request_run`` add the job before they
  write its keys, and nothing removes it; ``job_states()`` reads the state of
  each member (one pipeline) and lists those paused or with requests kept. A
  crash in between leaves a member with nothing to show: it is skipped.
* ``pending``: ``request_run`` adds the request after the job's script made
  it (only the script knows its slot); a claim that ends a request answers
  its requester and how it ended, and the store then marks the entry
  claimed (it stays until it expires: the instances that find it back up
  the run it started) or removes a skipped or expired one, as it does for a
  skipped or expired one a manual claim finds; ``pending_requests()`` reads
  the members not expired on the index's server clock, in one script call.
  Entries that expired are removed by the next ``request_run``. If the index
  write of ``request_run`` fails (the process dies, the index's node is
  down), ``request_run`` raises and the request is never found by an
  instance: it stays pending in the job's state until it expires, and no run
  starts (ask again). If the change after a claim fails, the entry stays
  as it was until it expires: instances that read it send a manual claim,
  which finds the run (``running``: they become backups, as for any run) or
  the request ended (``none``). So ``pending_requests()`` may list as
  pending a request that was claimed a moment ago, never misses one that was
  indexed, and no entry makes a run start twice: the job's keys decide.
  On a cluster the index's node judges expiry on its own clock, which may
  differ from the job's node by their clock skew.

Errors. Connection failures and timeouts, a server still loading its data,
a read-only replica and a cluster in reconfiguration raise
:class:`~leasecron.StoreUnavailable`, which the engine retries, with
tenacity, only while the answer still matters. Clients the store creates do
no retries of their own and time out (``socket_timeout``, default 5 s;
``socket_connect_timeout``, default 2 s), so a call cannot hang a runner.
Their connections (per node of a cluster) are a blocking pool of at most
``max_connections`` (default 64): a call beyond them waits up to
``socket_timeout`` for one to come free (redis-py's own pool would raise at
once: a thousand runs ending together must not fail their finishes).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ..compat import old_names_of
from ..controls import JobState, ManualRequest
from ..errors import ConfigError, StoreError
from ..runs import Claim
from ..states import RequestState
from . import require
from .base import ClaimRequest
from .redis_server import durability_warnings, server_version, store_error as _store_error
from .redis_reads import RedisReads
from .redis_scripts import (
    claim_args, control_keys, index_member, job_keys, load_scripts, read_claim, read_state, text,
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



class RedisStore(RedisReads):
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
        self._scripts = load_scripts()
        self._jobs_key = f"{prefix}:jobs"
        self._controlled_key = f"{prefix}:controlled"
        self._pending_key = f"{prefix}:pending"
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
            self._call(f"registering job {new[0]!r}" + ("" if len(new) == 1 else f" and {len(new) - 1} more"),
                       self.client.sadd, self._jobs_key, *new)  # fmt: skip
            with self._lock:
                self._registered.update(new)

    # -- the contract's writes (arguments checked by Store; the reads: RedisReads) -------

    def _claim(self, request: ClaimRequest) -> Claim:
        self._register((request.job,))
        return self._answers([request], [self._script("claim", request.job, *claim_args(request))])[0]

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """One pipeline of claim.lua calls: one round trip, one per node of a cluster."""
        self._register(list(dict.fromkeys(request.job for request in requests)))
        jobs, args = [request.job for request in requests], [claim_args(request) for request in requests]
        return self._answers(requests, self._script_many("claim", jobs, args, f"claims of {len(requests)} jobs"))

    def _answers(self, requests: List[ClaimRequest], replies: List[Any]) -> List[Claim]:
        """The claims claim.lua answered, once the jobs set and the index of requests know what
        they wrote (see the module's docstring)."""
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
        or a manual claim meets it again (see the module's docstring)."""
        member = index_member(job, slot_ms, requested_by)
        try:
            if state == RequestState.CLAIMED:
                self._index(f"marking the request of {job!r} at {slot_ms} claimed in the index", "claim",
                            member, index_member(job, slot_ms, requested_by, claimed=True))  # fmt: skip
            else:
                self._index(f"removing the request of {job!r} at {slot_ms} from the index", "remove", member)
        except StoreError as exc:  # the claim stands
            log.warning("leasecron: %s", exc)

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        return bool(self._script("heartbeat", job, slot_ms, token, lease_ms))

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        args: Tuple[Union[str, int], ...] = (slot_ms, token, status)
        if error is not None:
            args += (error,)
        return bool(self._script("finish", job, *args))

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return bool(self._script("release", job, slot_ms, token))

    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        self._call(f"registering job {job!r}", self.client.sadd, self._controlled_key, job)
        args: Tuple[str, ...] = ("pause", by) if note is None else ("pause", by, note)
        return read_state(job, self._script("pause", job, *args))

    def _resume(self, job: str, by: str) -> JobState:
        return read_state(job, self._script("pause", job, "resume", by))

    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        self._call(f"registering job {job!r}", self.client.sadd, self._controlled_key, job)
        slot, expires = (int(text(value)) for value in self._script("request", job, by, max_late_ms))
        doing = (
            f"indexing the request of {job!r} at {slot} (it is stored, but no instance will find it:"
            " it expires without a run; ask again)"
        )
        self._index(doing, "add", index_member(job, slot, by), expires)
        return ManualRequest(job, slot, by, expires, RequestState.PENDING)

    def server_version(self) -> str:
        """The server's kind and version, for example ``Valkey 9.1.2`` or ``Redis 7.0.15``."""
        return server_version(self._call("reading INFO server", self.client.info, "server"))

    def durability_warnings(self) -> List[str]:
        """Warn when the server does not log every write to its append-only file."""

        def appendfsync() -> Any:
            try:
                return self.client.config_get("appendfsync")
            except self._redis.exceptions.RedisError:
                return None  # CONFIG may be disabled (managed servers)

        return durability_warnings(self._call("reading INFO persistence", self.client.info, "persistence"), appendfsync)

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
