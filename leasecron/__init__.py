"""leasecron: cron jobs in a cluster, each slot run exactly once, on one instance.

Every instance of a service registers the same jobs. For every slot of a
job's schedule a shared store decides who runs it (the *claim*); a *lease*,
renewed by heartbeats, tells the cluster when the runner stopped; *backups*
take over a run whose lease ran out; *tokens* fence a runner that was only
frozen; a stopping instance *hands its runs over* at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

from . import compat
from .context import Context, Signal
from .errors import Aborted, ConfigError, LeaseCronError, StoreError, StoreUnavailable
from .events import Event
from .jobs import Job
from .runs import Claim, Run, RunBrief
from .stored import JobOverview, Overview, StoredJob, StoredSchedule
from .cron import LeaseCron
from .stores import MemoryStore, SQLiteStore, Store, open_store
from .version import __version__

if TYPE_CHECKING:  # pragma: no cover - resolved lazily by __getattr__ below
    from .stores.postgres import PostgresStore
    from .stores.redis import RedisStore

compat.install()  # the old module paths (leasecron.scheduler) still import


__all__ = [
    "Aborted",
    "Claim",
    "ConfigError",
    "Context",
    "Event",
    "Job",
    "JobOverview",
    "LeaseCron",
    "LeaseCronError",
    "MemoryStore",
    "Overview",
    "PostgresStore",
    "RedisStore",
    "Run",
    "RunBrief",
    "SQLiteStore",
    "Signal",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredJob",
    "StoredSchedule",
    "open_store",
    "__version__",
]

#: The stores whose client library is an optional extra: imported on first use, so that
#: ``import leasecron`` never imports redis-py or psycopg2 (the store's module imports neither).
_LAZY = {"RedisStore": "leasecron.stores.redis", "PostgresStore": "leasecron.stores.postgres"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
