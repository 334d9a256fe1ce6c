"""The names of earlier versions that still work: one table, each name warning once, all gone in 1.0.

:data:`OLD_NAMES` maps each old ``module.name`` to where the value lives
now. A module that still exists (``leasecron.runs``) gives its old names
through a module ``__getattr__`` made by :func:`old_names_of`; a module that
no longer exists (``leasecron.scheduler``, ``leasecron.live``) is served by
an import hook that :mod:`leasecron` installs (:func:`install`), so ``from
leasecron.scheduler import LeaseCron`` works as it did. The first use of each
old name in a process emits one :class:`DeprecationWarning` naming the new
place. This module imports nothing of the package: it finds the new homes by
name, when an old name is used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Set

__all__ = ["OLD_NAMES", "OLD_MODULES", "old_names_of", "resolve", "install"]

#: Every old name, ``module.name``, and the ``module.name`` (or ``module.Class.MEMBER``) it stands for.
OLD_NAMES: Dict[str, str] = {
    # 0.1: LeaseCron lived in leasecron.scheduler
    "leasecron.scheduler.LeaseCron": "leasecron.cron.LeaseCron",
    "leasecron.scheduler.default_runner": "leasecron.cron.default_runner",
    # 0.1: the protocol's values were plain strings in leasecron.runs; they are str Enums now
    "leasecron.runs.RUNNING": "leasecron.states.Status.RUNNING",
    "leasecron.runs.SUCCESS": "leasecron.states.Status.SUCCESS",
    "leasecron.runs.FAILED": "leasecron.states.Status.FAILED",
    "leasecron.runs.INTERRUPTED": "leasecron.states.Status.INTERRUPTED",
    "leasecron.runs.SCHEDULE": "leasecron.states.Reason.SCHEDULE",
    "leasecron.runs.CATCH_UP": "leasecron.states.Reason.CATCH_UP",
    "leasecron.runs.TAKEOVER": "leasecron.states.Reason.TAKEOVER",
    "leasecron.runs.MANUAL": "leasecron.states.Reason.MANUAL",
    "leasecron.runs.WON": "leasecron.states.Outcome.WON",
    "leasecron.runs.STATUSES": "leasecron.states.Status.values",
    "leasecron.runs.REASONS": "leasecron.states.Reason.values",
    "leasecron.runs.OUTCOMES": "leasecron.states.Outcome.values",
    "leasecron.runs.FINISH_STATUSES": "leasecron.stores.checks.FINISH_STATUSES",
    "leasecron.runs.Reason": "leasecron.states.Reason",
    # 0.1: the reasons of a lost event
    "leasecron.live.FENCED": "leasecron.states.LostCause.FENCED",
    "leasecron.live.UNRENEWED": "leasecron.states.LostCause.UNRENEWED",
    # 0.1: the reasons of an aborted signal
    "leasecron.context.LOST": "leasecron.states.AbortReason.LOST",
    "leasecron.context.STOP": "leasecron.states.AbortReason.STOP",
    "leasecron.context.TIMEOUT": "leasecron.states.AbortReason.TIMEOUT",
    # 0.2 development: the limits every store keeps were importable from the store contract
    "leasecron.stores.base.MAX_INT": "leasecron.limits.MAX_INT",
    "leasecron.stores.base.MAX_NAME_BYTES": "leasecron.limits.MAX_NAME_BYTES",
    "leasecron.stores.base.OVERLAP_MODES": "leasecron.limits.OVERLAP_MODES",
    "leasecron.stores.base.check_text": "leasecron.limits.check_text",
    # 0.2 development: the Redis store's scripts
    "leasecron.stores.redis._load_scripts": "leasecron.stores.redis_scripts.load_scripts",
}

#: The old modules that no longer exist as files: the import hook serves them.
OLD_MODULES = frozenset({"leasecron.scheduler", "leasecron.live"})

#: Names whose new home is a tuple of values, found by calling what the table names.
_CALLED = frozenset({"leasecron.runs.STATUSES", "leasecron.runs.REASONS", "leasecron.runs.OUTCOMES"})

_warned: Set[str] = set()
_lock = threading.Lock()


def resolve(old: str, stacklevel: int = 3) -> Any:
    """The value the old name ``old`` (a key of :data:`OLD_NAMES`) stands for, warning on its
    first use in this process."""
    new = OLD_NAMES[old]
    with _lock:
        first = old not in _warned
        _warned.add(old)
    if first:
        warnings.warn(
            f"{old} is deprecated and goes in leasecron 1.0: use {new}", DeprecationWarning, stacklevel=stacklevel
        )
    value = _find(new)
    return value() if old in _CALLED else value


def old_names_of(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` that gives its old names (and raises
    :class:`AttributeError` for any other name, as Python would)."""
    prefix = f"{module}."

    def __getattr__(name: str) -> Any:
        if prefix + name in OLD_NAMES:
            return resolve(prefix + name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def _find(dotted: str) -> Any:
    """The object at ``dotted``: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


class _OldModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves each of :data:`OLD_MODULES` as a module holding nothing but its old names."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[types.ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in OLD_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__doc__ = f"Deprecated: the old names of {module.__name__} (see leasecron.compat)."
        setattr(module, "__getattr__", old_names_of(module.__name__))  # noqa: B010 - a module attribute mypy types as a method


_FINDER = _OldModules()


def install() -> None:
    """Serve the old modules (idempotent; :mod:`leasecron` calls it on import)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
