"""RedisStore: the store contract on Redis or Valkey, standalone or cluster.

Each operation that writes is one Lua script (``stores/lua/<op>.lua``, with
``common.lua`` prepended, and the numbers of the protocol rendered in from
:mod:`leasecron.runs`), run with one ``EVALSHA``: the script reads the
server's clock with ``TIME`` and decides and writes atomically, so every
lease comparison uses the server's clock and no decision ever spans two
round trips. ``claim.lua`` tags each branch with the number of the rule of
the store contract it carries out. A script the server does not know (a restart, ``SCRIPT FLUSH``,
a failover) answers ``NOSCRIPT``; the store then loads it and calls again.

Keys. One job's state lives in four keys that share one hash tag, so a
cluster keeps them on one slot and a script can touch them all::

    <prefix>:{<job>}:runs       hash  slot_ms -> the run, as JSON
    <prefix>:{<job>}:slots      zset  every stored slot (score = slot_ms)
    <prefix>:{<job>}:running    zset  the running slots
    <prefix>:{<job>}:finished   zset  the finished slots
    <prefix>:jobs               set   the job names (read by jobs())

``<job>`` is the job name percent-encoded (every byte outside
``A-Z a-z 0-9 . _ -``, ``%`` and the braces included), so no name can end
its hash tag early, reach into another job's keys, or collide with another
name. The sorted sets make ``unfinished``, ``runs``, history pruning and
``jobs`` reads of one job's keys: no ``KEYS`` or ``SCAN`` anywhere.

The jobs set lives on another cluster slot than a job's keys, so a claim
script cannot write it. Instead a store adds a job to it (``SADD``, which is
idempotent) before its first claim of that job, and again after a claim that
stored the job's first run (the server may have lost its data since: a
restart without persistence, a failover); ``jobs()`` lists the members that
have stored runs. That is one extra round trip per job and process, and per
job whose history starts; every other claim, and every heartbeat, finish and
release, is one ``EVALSHA``.

Errors. Connection failures and timeouts, a server still loading its data,
a read-only replica and a cluster in reconfiguration raise
:class:`~leasecron.StoreUnavailable`, which the engine retries, with
tenacity, only while the answer still matters. Clients the store creates do
no retries of their own and time out (``socket_timeout``, default 5 s;
``socket_connect_timeout``, default 2 s), so a call cannot hang a runner.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError, StoreError, StoreUnavailable, shown
from ..runs import Claim, Run
from . import require
from .base import ClaimRequest, Store
from .records import new_token, read_record
from .templates import read_text, render
from .urls import masked_url, without_secrets

__all__ = ["RedisStore", "job_keys"]

log = logging.getLogger("leasecron")

#: URL schemes this store opens, and the redis-py scheme each one means.
URL_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}

#: Timeouts (seconds) of the clients the store creates; a URL may set others.
DEFAULT_SOCKET_TIMEOUT = 5.0
DEFAULT_CONNECT_TIMEOUT = 2.0

_SAFE = "._-"  # with letters and digits: the bytes a job name keeps in its key


def job_keys(prefix: str, job: str) -> Tuple[str, str, str, str]:
    """The four keys of ``job`` (runs, slots, running, finished), in one hash tag."""
    tag = f"{prefix}:{{{quote(job, safe=_SAFE)}}}"
    return f"{tag}:runs", f"{tag}:slots", f"{tag}:running", f"{tag}:finished"


class _Script:
    """One Lua script, called with EVALSHA and loaded again on NOSCRIPT."""

    def __init__(self, name: str, common: str) -> None:
        self.name = name
        self.source = render(f"{common}\n{read_text('lua', f'{name}.lua')}")
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Union[str, int]]) -> Any:
        redis = require("redis", extra="redis", store="RedisStore")
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


def _load_scripts() -> Dict[str, _Script]:
    common = read_text("lua", "common.lua")
    return {name: _Script(name, common) for name in ("claim", "heartbeat", "finish", "release", "runs")}


def _text(value: Union[str, bytes]) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _run(job: str, slot: Union[str, bytes], raw: Optional[Union[str, bytes]]) -> Run:
    """The run stored as JSON ``raw``; StoreError naming the job and slot if it was tampered with."""
    slot_text = _text(slot)
    unreadable = f"the stored run of job {job!r} at slot {slot_text} is unreadable"
    try:
        data = json.loads(_text(raw)) if raw is not None else None
    except ValueError as exc:  # not JSON (or not UTF-8)
        raise StoreError(f"{unreadable}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{unreadable}: {shown(data)} is no JSON object")
    return read_record(job, slot_text, data).to_run()


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
        self._scripts = _load_scripts()
        self._jobs_key = f"{prefix}:jobs"
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
        }
        options.update(client_options)
        try:
            if cluster in ("true", "1", "yes"):
                client = redis.cluster.RedisCluster.from_url(target, **options)
            else:
                options.setdefault("retry", redis.retry.Retry(redis.backoff.NoBackoff(), 0))
                client = redis.Redis.from_url(target, **options)
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

    # -- calls -------------------------------------------------------------------

    def _call(self, doing: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._redis.exceptions.RedisError as exc:
            raise _store_error(self._redis, exc, doing) from exc

    def _script(self, name: str, job: str, *args: Union[str, int]) -> Any:
        script = self._scripts[name]
        return self._call(f"{name} of {job!r}", script, self.client, job_keys(self.prefix, job), args)

    def _register(self, job: str, again: bool = False) -> None:
        if job in self._registered and not again:
            return
        self._call(f"registering job {job!r}", self.client.sadd, self._jobs_key, job)
        with self._lock:
            self._registered.add(job)

    # -- the contract (arguments checked by Store) -------------------------------------

    def now_ms(self) -> int:
        seconds, micros = self._call("reading the server's clock", self.client.time)
        return int(seconds) * 1000 + int(micros) // 1000

    def _claim(self, request: ClaimRequest) -> Claim:
        job = request.job
        self._register(job)
        fresh = new_token()  # the script's token for an attempt that must not get ``token``
        reply = self._script(
            "claim", job, request.slot_ms, fresh if request.token is None else request.token, request.runner,
            request.reason, request.lease_ms, request.max_attempts, request.max_late_ms, request.overlap,
            request.history_size, fresh,
        )  # fmt: skip
        if len(reply) == 4:  # the job's first stored run: make sure jobs() lists it
            try:
                self._register(job, again=True)
            except StoreError as exc:  # the claim stands; this process registers before its next claim
                with self._lock:
                    self._registered.discard(job)
                log.warning("leasecron: could not add job %r to %s (%s); will retry", job, self._jobs_key, exc)
        run = _run(job, reply[1], reply[2]) if len(reply) >= 3 else None
        return Claim(_text(reply[0]), run)

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        return bool(self._script("heartbeat", job, slot_ms, token, lease_ms))

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        args: Tuple[Union[str, int], ...] = (slot_ms, token, status)
        if error is not None:
            args += (error,)
        return bool(self._script("finish", job, *args))

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return bool(self._script("release", job, slot_ms, token))

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        raw = self._call(f"reading {job!r}", self.client.hget, job_keys(self.prefix, job)[0], str(slot_ms))
        return None if raw is None else _run(job, str(slot_ms), raw)

    def _unfinished(self, job: str) -> List[Run]:
        return self._read_runs(job, "unfinished", 0)

    def _runs(self, job: str, limit: int) -> List[Run]:
        return self._read_runs(job, "runs", limit)

    def _read_runs(self, job: str, which: str, limit: int) -> List[Run]:
        reply = self._script("runs", job, which, limit)
        return [_run(job, reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]

    def _jobs(self) -> List[str]:
        members = self._call("listing jobs", self.client.smembers, self._jobs_key)
        names = sorted(_text(m) for m in members)
        if not names:
            return []

        def stored() -> List[Any]:
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.exists(job_keys(self.prefix, name)[1])
            return list(pipe.execute())

        return [name for name, found in zip(names, self._call("listing jobs", stored)) if found]

    def server_version(self) -> str:
        """The server's kind and version, for example ``Valkey 9.1.2`` or ``Redis 7.0.15``."""
        info = self._call("reading INFO server", self.client.info, "server")
        if isinstance(info, dict) and info and all(isinstance(v, dict) for v in info.values()):
            info = next(iter(info.values()))  # a cluster answers per node: name one
        if "valkey_version" in info or str(info.get("server_name", "")).lower() == "valkey":
            return f"Valkey {info.get('valkey_version', info.get('redis_version'))}"
        return f"Redis {info.get('redis_version')}"

    def durability_warnings(self) -> List[str]:
        """Warn when the server does not log every write to its append-only file."""
        info = self._call("reading INFO persistence", self.client.info, "persistence")
        if isinstance(info, dict) and info and all(isinstance(v, dict) for v in info.values()):
            nodes = list(info.values())  # a cluster answers per node
        else:
            nodes = [info]
        if any(str(node.get("aof_enabled", "0")) != "1" for node in nodes):
            return [
                "the server runs without AOF (appendonly no): a restart forgets every lease and a slot"
                " can run twice; set appendonly yes and appendfsync always"
            ]
        try:
            fsync = self.client.config_get("appendfsync")
        except self._redis.exceptions.RedisError:
            return []  # CONFIG may be disabled (managed servers): AOF is on, its fsync policy unknown
        values = set(fsync.values()) if isinstance(fsync, dict) else set()
        if any(_text(v) != "always" for v in values if isinstance(v, (str, bytes))):
            return [
                "appendfsync is not 'always': a crash of the server's host can lose the last second"
                " of claims and heartbeats; set appendfsync always"
            ]
        return []

    def close(self) -> None:
        """Close the client if this store created it (from a URL)."""
        if self._owns_client:
            try:
                self.client.close()
            except self._redis.exceptions.RedisError:
                pass

    def __repr__(self) -> str:
        return f"RedisStore({self._label!r}, prefix={self.prefix!r})"


def _store_error(redis: Any, exc: Exception, doing: str) -> StoreError:
    e = redis.exceptions
    retryable: Tuple[type, ...] = (
        e.ConnectionError,
        e.TimeoutError,
        e.BusyLoadingError,
        e.ReadOnlyError,
        e.ClusterDownError,
        e.TryAgainError,
        e.MasterDownError,
    )
    text = f"Redis {doing}: {type(exc).__name__}: {exc}"
    if isinstance(exc, (e.AuthenticationError, e.AuthenticationWrongNumberOfArgsError)):
        # not worth retrying: the same credentials are refused again (redis-py makes it a ConnectionError)
        return StoreError(f"Redis {doing}: authentication failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, retryable):
        return StoreUnavailable(text)
    return StoreError(text)
