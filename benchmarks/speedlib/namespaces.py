"""A store of a measurement's own, on any kind of store, and nothing of it left behind.

``spec`` says which kind: ``memory`` (a new ``MemoryStore``), ``sqlite`` (a
new file in the directory ``tmp``, which the caller removes), or a server's
URL:

* ``redis://``, ``rediss://``, ``valkey://``, ``valkeys://``: the key prefix
  ``leasecron_<name>_<pid>`` (it replaces any ``prefix=`` of the URL); a
  prefix under which a key exists already is refused, never used, and every
  key under it is deleted at the end;
* ``postgresql://``, ``postgres://``: a fresh schema ``leasecron_<name>_<pid>``
  (it replaces any ``schema=`` of the URL), made and dropped by
  ``speedlib.pg_schema.postgres_bench_store``.

The end comes also after an error, Ctrl-C, or a SIGTERM that the script
turned into ``SystemExit`` (``speedlib.sigterm.exit_on_sigterm``); a SIGKILL leaves
the namespace behind, under a name that says whose it was. The code works
with the ``leasecron`` of the commit before issue 14 too (``speedlib.baseline``
runs it there).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Tuple
from urllib.parse import urlsplit

import leasecron
from leasecron.stores import MemoryStore, Store

from .pg_schema import postgres_bench_store
from .urls import replace_option, without_option

REDIS_SCHEMES = ("redis", "rediss", "valkey", "valkeys")
POSTGRES_SCHEMES = ("postgresql", "postgres")


def kind_of(spec: str) -> str:
    """``memory``, ``sqlite``, ``redis`` or ``postgresql``; ``ValueError`` for anything else."""
    if spec in ("memory", "sqlite"):
        return spec
    scheme = urlsplit(spec).scheme.lower()
    if scheme in REDIS_SCHEMES:
        return "redis"
    if scheme in POSTGRES_SCHEMES:
        return "postgresql"
    raise ValueError(f"{spec!r}: give memory, sqlite (a temporary file), or a redis://, valkey:// or postgresql:// URL")


@contextmanager
def own_store(spec: str, name: str, tmp: str) -> Iterator[Tuple[Store, str]]:
    """A store of its own for ``name`` (letters, digits, ``_``) and a phrase saying where it is."""
    kind = kind_of(spec)
    if kind == "memory":
        store: Store = MemoryStore()
        try:
            yield store, "a new MemoryStore"
        finally:
            store.close()
    elif kind == "sqlite":
        path = os.path.join(tmp, f"{name}.db")
        if os.path.exists(path):
            raise SystemExit(f"{path} exists; not touching it")
        store = leasecron.open_store(f"sqlite:///{path}")
        try:
            yield store, "a new file in a temporary directory"
        finally:
            store.close()
    elif kind == "redis":
        with _redis_store(spec, f"leasecron_{name}_{os.getpid()}") as store:
            yield store, f"key prefix {store.prefix}, its keys deleted at the end"  # type: ignore[attr-defined]
    else:
        with postgres_bench_store(without_option(spec, "schema"), name=name) as (store, _owned):
            yield store, f"schema {store.schema}, dropped at the end"


@contextmanager
def _redis_store(url: str, prefix: str) -> Iterator[Store]:
    store = leasecron.open_store(replace_option(url, "prefix", prefix))
    client = store.client  # type: ignore[attr-defined]
    pattern = f"{prefix}:*"  # every key the store makes starts so (letters, digits and _ need no escape)
    try:
        if next(iter(client.scan_iter(match=pattern, count=1000)), None) is not None:
            raise SystemExit(f"keys exist under the prefix {prefix!r} (left by a killed run?); not touching them")
    except BaseException:
        store.close()
        raise
    try:
        yield store
    finally:
        try:
            pipe = client.pipeline(transaction=False)  # one key per DEL: keys of many cluster slots
            for key in client.scan_iter(match=pattern, count=1000):
                pipe.delete(key)
            pipe.execute()
        finally:
            store.close()
