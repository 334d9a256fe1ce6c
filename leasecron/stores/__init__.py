"""The stores, and :func:`open_store` to open one from a URL.

``sqlite://``, ``redis://`` (``rediss://``, ``valkey://``, ``valkeys://``), ``postgresql://``
(``postgres://``) and ``memory://`` (:data:`SCHEMES`); each store decides on its own clock. A
backend whose client library is an optional extra is imported on first use, through
:func:`require`, which names the ``pip install`` command when it is missing. :doc:`stores` says
which store to choose, its URL options and how it works.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict, Tuple
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..stored import JobOverview, Overview
from .base import ClaimRequest, Finish, Store
from .delegating import DelegatingStore
from .memory import MemoryStore
from .reads import StoreReads
from .sqlite import SQLiteStore
from .urls import masked_url, without_secrets

__all__ = [
    "Store", "StoreReads", "ClaimRequest", "Finish", "DelegatingStore", "MemoryStore", "SQLiteStore",
    "Overview", "JobOverview", "open_store", "require", "SCHEMES",
]  # fmt: skip

#: URL scheme -> (module, class) of the store that serves it.
SCHEMES: Dict[str, Tuple[str, str]] = {
    "memory": ("leasecron.stores.memory", "MemoryStore"),
    "sqlite": ("leasecron.stores.sqlite", "SQLiteStore"),
    "redis": ("leasecron.stores.redis", "RedisStore"),
    "rediss": ("leasecron.stores.redis", "RedisStore"),
    "valkey": ("leasecron.stores.redis", "RedisStore"),
    "valkeys": ("leasecron.stores.redis", "RedisStore"),
    "redis+sentinel": ("leasecron.stores.redis", "RedisStore"),
    "valkey+sentinel": ("leasecron.stores.redis", "RedisStore"),
    "postgresql": ("leasecron.stores.postgres", "PostgresStore"),
    "postgres": ("leasecron.stores.postgres", "PostgresStore"),
}


def open_store(url: str, *, create: bool = True) -> Store:
    """Open the store a URL names, for example ``sqlite:///leasecron.db``.

    ``create=False`` opens a store that creates nothing: no SQLite file, no
    PostgreSQL schema or table, no migration. An operation on a store that
    does not exist then raises :class:`~leasecron.StoreError` naming what is
    missing (the read-only commands, ``leasecron runs`` and ``jobs``, open
    their store so). Redis and memory stores create nothing to read, and
    accept the flag.

    Raises :class:`~leasecron.ConfigError` for an unknown scheme or bad
    options, and for a backend whose client library is not installed (the
    message says what to install). No message shows a password of the URL.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = repr(masked_url(url)) if isinstance(url, str) else repr(url)
        raise ConfigError(f"store URL must look like scheme://..., not {shown}; known schemes: {_known()}")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # urllib's own complaint, say "Invalid IPv6 URL"
        raise ConfigError(f"bad store URL {masked_url(url)!r}: {without_secrets(str(exc), url)}") from None
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown store URL scheme {scheme!r} in {masked_url(url)!r}; known schemes: {_known()}")
    module_name, class_name = SCHEMES[scheme]
    store_class = getattr(importlib.import_module(module_name), class_name)
    store: Store = store_class.from_url(url, create=create)
    return store


def require(module: str, *, extra: str, store: str) -> ModuleType:
    """Import a backend's client library, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"{store} needs the Python package {module!r}, which is not installed:"
            f" pip install 'leasecron[{extra}]'"
        ) from exc


def _known() -> str:
    return ", ".join(f"{s}://" for s in SCHEMES)


#: What this package resolves on first use, so that importing it never imports redis-py or
#: psycopg2: the store classes of the optional backends, and their modules.
_LAZY = {
    "RedisStore": "leasecron.stores.redis",
    "PostgresStore": "leasecron.stores.postgres",
    "redis": "leasecron.stores.redis",
    "postgres": "leasecron.stores.postgres",
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    return module if name in ("redis", "postgres") else getattr(module, name)
