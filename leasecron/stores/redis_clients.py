"""How a :class:`~leasecron.stores.redis.RedisStore` opens its client from a URL (:func:`open_client`).

One server (``redis://``, ``rediss://``, ``valkey://``, ``valkeys://``), a Cluster
(``?cluster=true``), or the primary that Sentinels name (``redis+sentinel://``,
``valkey+sentinel://``), which the client finds again after a failover. Every client the store
makes does no retries of its own (leasecron retries, knowing how long an answer matters) and
holds a blocking pool of :data:`DEFAULT_MAX_CONNECTIONS` connections per server.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from .redis_packing import command_packer
from .redis_server import store_error
from .urls import masked_url, without_secrets

__all__ = ["Opened", "open_client", "URL_SCHEMES", "SENTINEL_SCHEMES", "DEFAULT_REPLICA_WAIT_MS"]

#: URL schemes of one server or a cluster, and the redis-py scheme each one means.
URL_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}
#: URL schemes of a primary found through Sentinel.
SENTINEL_SCHEMES = ("redis+sentinel", "valkey+sentinel")
#: Timeouts (seconds) of the clients the store creates; a URL may set others.
DEFAULT_SOCKET_TIMEOUT = 5.0
DEFAULT_CONNECT_TIMEOUT = 2.0
#: Connections of a client the store creates (per server); more calls wait for one.
DEFAULT_MAX_CONNECTIONS = 64
#: How long a write waits for its replicas (``replica_wait_ms``), when it waits for any.
DEFAULT_REPLICA_WAIT_MS = 500
#: The port of a Sentinel given without one.
SENTINEL_PORT = 26379
#: The query options of a Sentinel URL, beside the store's own (``prefix``, ``replicas``, ...).
_SENTINEL_OPTIONS = ("sentinel_password", "socket_timeout", "socket_connect_timeout")


@dataclasses.dataclass(frozen=True)
class Opened:
    """A client opened from a URL, and what the URL says of the store around it."""

    client: Any
    #: ``redis`` or ``valkey``, after the URL's scheme.
    kind: str
    #: The URL with its passwords masked: how the store names itself.
    label: str
    prefix: str
    replicas: int
    replica_wait_ms: int


def open_client(redis: Any, url: str, client_options: Dict[str, Any]) -> Opened:
    """Open the client ``url`` names (``redis`` is the redis-py module); ``client_options`` go to
    redis-py. :class:`~leasecron.ConfigError` for a bad URL, :class:`~leasecron.StoreError` when
    a server that must be asked at once (a cluster's nodes) does not answer."""
    parts = urlsplit(url)
    scheme, shown = parts.scheme.lower(), masked_url(url)
    if scheme not in URL_SCHEMES and scheme not in SENTINEL_SCHEMES:
        known = ", ".join([*URL_SCHEMES, *SENTINEL_SCHEMES])
        raise ConfigError(f"RedisStore URL must start with one of {known}, not {shown!r}")
    query = parse_qs(parts.query, keep_blank_values=True)
    prefix = query.pop("prefix", ["leasecron"])[-1]
    replicas = _whole(query.pop("replicas", ["0"])[-1], "replicas", 0, shown)
    wait_ms = _whole(query.pop("replica_wait_ms", [str(DEFAULT_REPLICA_WAIT_MS)])[-1], "replica_wait_ms", 1, shown)
    try:
        if scheme in SENTINEL_SCHEMES:
            client = _through_sentinel(redis, url, parts.netloc, parts.path, query, client_options)
        else:
            client = _direct(redis, url, URL_SCHEMES[scheme], parts, query, client_options)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad Redis URL {shown!r}: {without_secrets(str(exc), url)}") from exc
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
        # RedisClusterException (no node answers as a cluster node) is no RedisError
        error = store_error(redis, exc, f"cannot connect to {shown}")
        raise type(error)(without_secrets(str(error), url)) from exc
    return Opened(client, "valkey" if scheme.startswith("valkey") else "redis", shown, prefix, replicas, wait_ms)


def _direct(
    redis: Any, url: str, scheme: str, parts: Any, query: Dict[str, List[str]], client_options: Dict[str, Any]
) -> Any:
    """A client of one server, or of a cluster (``cluster=true``)."""
    shown = masked_url(url)
    database = parts.path.strip("/")
    if database and not database.isdigit():  # redis-py would quietly use database 0
        raise ConfigError(
            f"bad Redis URL {shown!r}: the database must be a number (redis://host:6379/0),"
            f" not {without_secrets(database, url)!r}"
        )
    cluster = query.pop("cluster", ["false"])[-1].lower()
    if cluster not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(f"cluster in {shown!r} must be true or false, not {cluster!r}")
    target = urlunsplit((scheme, parts.netloc, parts.path, urlencode(query, doseq=True), ""))
    options = _pool_options(redis, query, client_options)
    if cluster in ("true", "1", "yes"):
        if "retry" not in client_options:  # a cluster client takes its retries otherwise
            options.pop("retry")
        options.pop("command_packer", None)  # a cluster client gives its nodes no packer
        return redis.cluster.RedisCluster.from_url(target, **options)
    pool = options.pop("connection_pool_class").from_url(target, **options)  # Redis.from_url takes no class
    return redis.Redis.from_pool(pool)


def _pool_options(redis: Any, query: Dict[str, List[str]], client_options: Dict[str, Any]) -> Dict[str, Any]:
    """The options of a client the store makes: its timeouts, a blocking pool, no retries."""
    options: Dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "connection_pool_class": redis.BlockingConnectionPool,
        "max_connections": DEFAULT_MAX_CONNECTIONS,
        "retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0),
    }
    packer = command_packer(redis, client_options)
    if packer is not None:  # the same bytes, packed at once (stores/redis_packing.py)
        options["command_packer"] = packer
    options.update(client_options)
    # the wait for a free connection: as long as a call may take, the URL's socket_timeout if it has one
    wait = query.get("socket_timeout", [""])[-1]
    options.setdefault("timeout", float(wait) if wait.replace(".", "", 1).isdigit() else options["socket_timeout"])
    return options


def _through_sentinel(
    redis: Any, url: str, netloc: str, path: str, query: Dict[str, List[str]], client_options: Dict[str, Any]
) -> Any:
    """A client of the primary of ``service`` that the Sentinels of ``netloc`` name, found again
    after each failover (:class:`SentinelBlockingPool`)."""
    shown = masked_url(url)
    unknown = sorted(set(query) - set(_SENTINEL_OPTIONS))
    if unknown:
        raise ConfigError(
            f"bad Redis URL {shown!r}: unknown option {unknown[0]!r} of a Sentinel URL;"
            f" known: prefix, replicas, replica_wait_ms, {', '.join(_SENTINEL_OPTIONS)}"
        )
    userinfo, _, hosts = netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = [_host_port(host, shown) for host in hosts.split(",")]
    names = [part for part in path.split("/") if part]
    if not names or len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise ConfigError(
            f"bad Redis URL {shown!r}: a Sentinel URL names the service and a database:"
            f" redis+sentinel://host:26379,host:26380/service_name[/db]"
        )
    options = _pool_options(redis, query, client_options)
    options.pop("connection_pool_class")
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name in query:
            options[name] = float(query[name][-1])
    sentinel_password = query.get("sentinel_password", [""])[-1]
    asking = {name: options[name] for name in ("socket_timeout", "socket_connect_timeout", "retry")}
    sentinel = redis.sentinel.Sentinel(
        sentinels, sentinel_kwargs={**asking, "password": unquote(sentinel_password) or None},
        username=unquote(username) or None, password=unquote(password) or None,
        db=int(names[1]) if len(names) == 2 else 0,
    )  # fmt: skip
    return sentinel.master_for(names[0], connection_pool_class=_blocking_pool_class(redis), **options)


def _host_port(text: str, shown: str) -> Tuple[str, int]:
    """``host:port`` (``[::1]:26379``; the port defaults to 26379) of a Sentinel."""
    host, colon, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not colon:
        host, port = text, str(SENTINEL_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"bad Redis URL {shown!r}: a Sentinel must be host:port, not {text!r}")
    return host, int(port)


def _whole(value: str, name: str, minimum: int, shown: str) -> int:
    """A whole number of the URL's query, from ``minimum`` to 2**50."""
    if not value.isdigit() or not minimum <= int(value) <= 2**50:
        raise ConfigError(f"{name} in {shown!r} must be a whole number from {minimum}, not {value!r}")
    return int(value)


_SENTINEL_POOL: List[type] = []


def _blocking_pool_class(redis: Any) -> type:
    """A Sentinel's connection pool that, as the store's other pools, waits for a free connection
    (redis-py's own raises once ``max_connections`` are out): made once, redis-py being imported
    only when a store is."""
    if not _SENTINEL_POOL:
        bases = (redis.sentinel.SentinelConnectionPool, redis.BlockingConnectionPool)
        _SENTINEL_POOL.append(type("SentinelBlockingPool", bases, {"__module__": __name__}))
    return _SENTINEL_POOL[0]
