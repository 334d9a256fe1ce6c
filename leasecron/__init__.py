"""leasecron: cron jobs in a cluster, each slot run exactly once, on one instance.

Every instance of a service registers the same jobs. For every slot of a
job's schedule a shared store decides who runs it (the *claim*); a *lease*,
renewed by heartbeats, tells the cluster when the runner stopped; *backups*
take over a run whose lease ran out; *tokens* fence a runner that was only
frozen; a stopping instance *hands its runs over* at once.
"""

from __future__ import annotations

from .context import Context, Signal
from .errors import Aborted, ConfigError, LeaseCronError, StoreError, StoreUnavailable
from .events import Event
from .jobs import Job
from .runs import Claim, Run
from .scheduler import LeaseCron
from .stores import MemoryStore, SQLiteStore, Store, open_store

__version__ = "0.1.0.dev0"

__all__ = [
    "Aborted",
    "Claim",
    "ConfigError",
    "Context",
    "Event",
    "Job",
    "LeaseCron",
    "LeaseCronError",
    "MemoryStore",
    "Run",
    "SQLiteStore",
    "Signal",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "open_store",
    "__version__",
]
