"""Finding the ``LeaseCron`` that a ``"module:attr"`` string names.

The ``leasecron run``, ``jobs --app`` and ``dashboard --app`` commands and the
gunicorn hooks all name the cron they work on this way, so they share one
reading of it and one set of messages.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ..cron import LeaseCron
from ..errors import ConfigError

__all__ = ["load_cron", "check_target"]


def check_target(target: object, what: str = "") -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``target`` has the shape ``module:attr``."""
    what = f"{what}: " if what else ""
    if not isinstance(target, str):
        raise ConfigError(f"{what}the cron's target must be a 'module:attr' string, not {target!r}")
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}expected module:attr (for example myapp.tasks:cron), not {target!r}")


def load_cron(target: str, what: str = "") -> LeaseCron:
    """Import ``module:attr`` (the current directory first on ``sys.path``) and return its LeaseCron.

    ``attr`` may be dotted, and may end in ``()`` to call a factory with no
    arguments (``myapp:create_app()``). The object may be a
    :class:`~leasecron.LeaseCron` or an application holding one in
    ``extensions["leasecron"]`` (a Flask app with
    :class:`~leasecron.contrib.flask.LeaseCronExtension`). Anything else
    raises :class:`~leasecron.ConfigError` with one line saying what is wrong
    (after ``what``, the option that named the target, if any).
    """
    check_target(target, what)
    what = f"{what}: " if what else ""
    module_name, _, attr = target.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"{what}cannot import {module_name!r}: no such module (searched from {cwd})") from None
        raise
    call = attr.endswith("()")
    obj: Any = module
    for part in (attr[:-2] if call else attr).split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}module {module_name!r} has no attribute {attr!r}") from None
    if call:
        if not callable(obj):
            raise ConfigError(f"{what}{target} calls {type(obj).__name__} {attr[:-2]!r}, which is not callable")
        obj = obj()
    extensions = getattr(obj, "extensions", None)
    if not isinstance(obj, LeaseCron) and isinstance(extensions, dict):
        if not isinstance(extensions.get("leasecron"), LeaseCron):
            raise ConfigError(
                f"{what}{target} is an app without leasecron: call LeaseCronExtension.init_app(app) on it"
            )
        obj = extensions["leasecron"]
    if not isinstance(obj, LeaseCron):
        raise ConfigError(
            f"{what}{target} is a {type(obj).__name__}, not a leasecron.LeaseCron"
            " (nor an app with leasecron.contrib.flask.LeaseCronExtension)"
        )
    return obj
