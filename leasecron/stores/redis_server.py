"""What a Redis or Valkey server says about itself: its kind and version, whether it keeps
every write (AOF), and which of its errors are worth retrying."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from ..errors import StoreError, StoreUnavailable
from .redis_replies import text

__all__ = ["server_version", "durability_warnings", "replication_lines", "store_error"]


def _nodes(info: Any) -> List[Dict[str, Any]]:
    """The INFO reply of each node: a cluster answers per node, a server once."""
    if isinstance(info, dict) and info and all(isinstance(v, dict) for v in info.values()):
        return list(info.values())
    return [info]


def server_version(info: Any) -> str:
    """``Valkey 9.1.2`` or ``Redis 7.0.15``, from an ``INFO server`` reply (of one node of a cluster)."""
    node = _nodes(info)[0]
    if "valkey_version" in node or str(node.get("server_name", "")).lower() == "valkey":
        return f"Valkey {node.get('valkey_version', node.get('redis_version'))}"
    return f"Redis {node.get('redis_version')}"


def durability_warnings(info: Any, appendfsync: Callable[[], Any]) -> List[str]:
    """Warnings from an ``INFO persistence`` reply, and ``appendfsync()`` (the ``CONFIG GET``
    reply, or None where CONFIG is disabled) once AOF is on everywhere."""
    if any(str(node.get("aof_enabled", "0")) != "1" for node in _nodes(info)):
        return [
            "the server runs without AOF (appendonly no): a restart forgets every lease and a slot"
            " can run twice; set appendonly yes and appendfsync always"
        ]
    fsync = appendfsync()  # None: AOF is on, its fsync policy unknown
    values = set(fsync.values()) if isinstance(fsync, dict) else set()
    if any(text(v) != "always" for v in values if isinstance(v, (str, bytes))):
        return [
            "appendfsync is not 'always': a crash of the server's host can lose the last second"
            " of claims and heartbeats; set appendfsync always"
        ]
    return []


def replication_lines(info: Any, replicas: int) -> Tuple[List[str], List[str]]:
    """From an ``INFO replication`` reply (each primary's, on a cluster): what ``leasecron check``
    shows of the replicas (each with its state and how far behind it is), and the warnings: a
    failover that can lose acknowledged writes (``replicas=0`` beside replicas), or a
    ``replicas=N`` that fewer replicas than N can meet now (every write fails meanwhile)."""
    lines: List[str] = []
    streaming: List[int] = []
    for node in _nodes(info):
        if node.get("role") != "master":
            continue
        offset = int(node.get("master_repl_offset", 0))
        found = [value for key, value in node.items() if key.startswith("slave") and isinstance(value, dict)]
        online = [r for r in found if r.get("state") == "online"]
        streaming.append(len(online))
        lines.append(f"primary: {len(online)} of {len(found)} replica(s) online, replication offset {offset}")
        for replica in found:
            behind = offset - int(replica.get("offset", 0))
            lines.append(
                f"replica {replica.get('ip')}:{replica.get('port')} {replica.get('state')},"
                f" {behind} bytes behind, last ack {replica.get('lag')} s ago"
            )
    if not lines:
        return [], []
    fewest = min(streaming)
    warnings = []
    if replicas == 0 and fewest > 0:
        warnings.append(
            "the store waits for no replica (replicas=0): a failover to a replica can lose acknowledged"
            " claims and renewals, and a slot can run twice; set replicas=N (N: every replica that can be"
            " promoted)"
        )
    if replicas > fewest:
        warnings.append(
            f"replicas={replicas} cannot be met now: {fewest} replica(s) online; every write fails"
            " until enough replicas stream again"
        )
    if replicas:
        state = "met now" if replicas <= fewest else "NOT met now"
        lines.append(f"replicas={replicas}: each write waits for {replicas} replica(s): {state}")
    return lines, warnings


def store_error(redis: Any, exc: Exception, doing: str) -> StoreError:
    """The store's error for redis-py's ``exc`` while ``doing``: :class:`~leasecron.StoreUnavailable`
    for what passes (a lost connection, a timeout, a server loading or failing over), else
    :class:`~leasecron.StoreError`."""
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
    message = f"Redis {doing}: {type(exc).__name__}: {exc}"
    if isinstance(exc, (e.AuthenticationError, e.AuthenticationWrongNumberOfArgsError)):
        # not worth retrying: the same credentials are refused again (redis-py makes it a ConnectionError)
        return StoreError(f"Redis {doing}: authentication failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, retryable):
        return StoreUnavailable(message)
    return StoreError(message)
