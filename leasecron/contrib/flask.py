"""Flask: :class:`LeaseCronExtension`, the ``init_app`` extension, and the ``flask leasecron`` commands.

Jobs, tasks (the handlers of stored jobs) and event callbacks are registered on the extension,
usually at import time, before any app exists; :meth:`LeaseCronExtension.init_app` builds one
:class:`~leasecron.LeaseCron` per app from its ``LEASECRON_*`` config keys (:data:`CONFIG_KEYS`;
a key wins over the constructor's option), registers every job and task with a handler that runs
inside ``app.app_context()``, and adds the ``flask leasecron`` group
(:mod:`leasecron.contrib.flask_commands`). The one idea: ``init_app`` never starts the cron,
since every process that creates the app would run jobs; start it where they belong.
:doc:`The Flask guide <flask>` says where to start it, the config keys and the commands.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

try:
    from flask import Flask, current_app
except ImportError as exc:  # pragma: no cover - the test environment has Flask
    raise ImportError(f"leasecron.contrib.flask needs Flask: pip install 'leasecron[flask]' ({exc})") from exc

from ..errors import ConfigError
from ..events import EVENT_TYPES, Callback, Event
from ..jobs import Handler, job_decorator, job_name, job_schedule, make_task
from ..options import OPTION_NAMES, OPTIONS, check_option
from ..cron import LeaseCron
from ..schedules import ScheduleSpec
from ..stores import Store, open_store
from .flask_commands import EXTENSION_KEY, cli, cron_of

__all__ = ["LeaseCronExtension", "CONFIG_KEYS", "EXTENSION_KEY", "cli"]

#: Each config key and the :class:`~leasecron.LeaseCron` option it sets.
CONFIG_KEYS: Dict[str, str] = {
    "LEASECRON_STORE": "store",
    "LEASECRON_RUNNER": "runner",
    **{option.config_key: option.name for option in OPTIONS},
}
_KEY_OF = {name: key for key, name in CONFIG_KEYS.items()}
#: The settings given as text (the others are whole numbers, also when given as text).
_TEXT_OPTIONS = ("store", "runner", *(option.name for option in OPTIONS if not option.integer))


class LeaseCronExtension:
    """Runs a Flask app's cron jobs with leasecron: ``ext = LeaseCronExtension(); ext.init_app(app)``.

    ``options`` are the code's defaults of the app config keys, by option
    name (``store``, ``runner``, ``lease_ms``, … ``stop_timeout_ms``,
    ``claim_threads``, ``poll_ms``); the app's ``LEASECRON_*`` config keys win over them.
    With ``app``, :meth:`init_app` is called at once.
    """

    def __init__(self, app: Optional[Flask] = None, **options: Any) -> None:
        unknown = sorted(set(options) - set(_KEY_OF))
        if unknown:
            raise ConfigError(
                f"LeaseCronExtension: unknown option {unknown[0]!r}{_nearest(unknown[0], _KEY_OF)};"
                f" known: {', '.join(_KEY_OF)}"
            )
        self._options = {name: value for name, value in options.items() if value is not None}
        self._jobs: List[Tuple[str, Handler, ScheduleSpec, Dict[str, Any]]] = []
        self._tasks: List[Tuple[str, Handler]] = []
        self._callbacks: List[Tuple[str, Callback]] = []
        self._apps: List[Tuple[Flask, LeaseCron]] = []
        if app is not None:
            self.init_app(app)

    # -- registration (before or after init_app) ---------------------------------------

    def job(
        self, schedule: ScheduleSpec, *, name: Optional[str] = None, **options: Any
    ) -> Callable[[Handler], Handler]:
        """Decorator: register the function as a job of every app (see :meth:`add_job`); returns it unchanged."""
        return job_decorator(self.add_job, schedule, name, options)

    def add_job(self, func: Handler, schedule: ScheduleSpec, *, name: Optional[str] = None, **options: Any) -> None:
        """Register ``func`` to run on ``schedule`` inside the app context of every app of this extension.

        As :meth:`leasecron.LeaseCron.add_job`: ``name`` defaults to
        ``"module.qualname"``, ``options`` override the app's defaults. What
        can be checked without the app's config is checked now
        (:class:`~leasecron.ConfigError` naming the job); the rest when an
        app is initialised.
        """
        name = job_name(func, name)
        if any(name == known for known, _, _, _ in self._jobs):
            raise ConfigError(f"job {name!r} is already registered")
        for option, value in options.items():
            check_option(option, value, name)
        job_schedule(name, schedule, options.get("tz", "UTC"))
        for app, cron in self._apps:
            cron.add_job(_in_app_context(app, func), schedule, name=name, **options)
        self._jobs.append((name, func, schedule, dict(options)))

    def task(self, name: Optional[str] = None) -> Callable[[Handler], Handler]:
        """Decorator: register the function as a task of every app (:meth:`leasecron.LeaseCron.task`),
        the handler of the stored jobs that name it, run inside the app context; returns it unchanged.
        ``name`` defaults to ``"module.qualname"``. Also after ``init_app``: it reaches every app."""

        def register(func: Handler) -> Handler:
            task = make_task(func, name)  # ConfigError now, before any app
            if any(task.name == known for known, _ in self._tasks):
                raise ConfigError(f"task {task.name!r} is already registered")
            for app, cron in self._apps:
                cron.task(task.name)(_in_app_context(app, func))
            self._tasks.append((task.name, func))
            return func

        return register

    def on(self, event: str, callback: Callback) -> None:
        """Call ``callback(event)``, inside the app context, on each event of a type (see
        :meth:`leasecron.LeaseCron.on`), for every app of this extension."""
        if event not in EVENT_TYPES:
            raise ConfigError(f"unknown event {event!r}; known: {', '.join(EVENT_TYPES)}")
        if not callable(callback):
            raise ConfigError(f"event callback must be callable, not {callback!r}")
        for app, cron in self._apps:
            cron.on(event, _callback_in_app_context(app, callback))
        self._callbacks.append((event, callback))

    # -- apps ------------------------------------------------------------------------------

    def init_app(self, app: Flask) -> LeaseCron:
        """Build the app's :class:`~leasecron.LeaseCron` from its config, with every job and task registered.

        Stores it in ``app.extensions["leasecron"]`` and returns it; adds the
        ``flask leasecron`` commands. Does not start it (see :doc:`the Flask guide <flask>`:
        start it in each gunicorn worker, in ``flask leasecron run``, or with
        :meth:`start`).
        """
        if EXTENSION_KEY in app.extensions:
            raise ConfigError(f"Flask app {app.name!r} already has leasecron (init_app was called on it before)")
        cron, opened = self._build(app)
        try:
            for name, func, schedule, options in self._jobs:
                cron.add_job(_in_app_context(app, func), schedule, name=name, **options)
            for name, func in self._tasks:
                cron.task(name)(_in_app_context(app, func))
        except ConfigError:
            if opened:  # a store given as an object stays open: it is its owner's
                cron.store.close()
            raise
        for event, callback in self._callbacks:
            cron.on(event, _callback_in_app_context(app, callback))
        app.extensions[EXTENSION_KEY] = cron
        app.cli.add_command(cli)
        self._apps.append((app, cron))
        return cron

    def get_cron(self, app: Optional[Flask] = None) -> LeaseCron:
        """The LeaseCron of ``app`` (default: the current app)."""
        return cron_of(app if app is not None else current_app)

    def start(self, app: Optional[Flask] = None) -> LeaseCron:
        """Start the LeaseCron of ``app`` (default: the current app) in this process; returns it."""
        cron = self.get_cron(app)
        cron.start()
        return cron

    def stop(self, app: Optional[Flask] = None, timeout: Optional[float] = None) -> None:
        """Stop the LeaseCron of ``app`` (default: the current app): live runs are handed over."""
        self.get_cron(app).stop(timeout)

    def _build(self, app: Flask) -> Tuple[LeaseCron, bool]:
        """The app's LeaseCron, and whether its store was opened here (from a URL)."""
        settings = dict(self._options)
        source = {name: f"LeaseCronExtension({name}=...)" for name in settings}
        for key, value in app.config.items():
            if not key.startswith("LEASECRON_"):
                continue
            if key not in CONFIG_KEYS:
                raise ConfigError(
                    f"unknown Flask config key {key!r}{_nearest(key, CONFIG_KEYS)}; leasecron reads"
                    f" {', '.join(CONFIG_KEYS)}"
                )
            if value is not None:
                settings[CONFIG_KEYS[key]] = _coerce(key, CONFIG_KEYS[key], value)
                source[CONFIG_KEYS[key]] = f"Flask config {key}"
        store = settings.pop("store", None)
        if store is None:
            raise ConfigError(
                f"Flask config LEASECRON_STORE is not set for app {app.name!r}: set it to a store URL,"
                " for example app.config['LEASECRON_STORE'] = 'sqlite:///leasecron.db'"
            )
        for name in OPTION_NAMES:
            if name in settings:
                try:
                    check_option(name, settings[name])
                except ConfigError as exc:
                    raise ConfigError(f"{source[name]}: {_without_prefix(exc)}") from None
        opened = isinstance(store, str)
        if isinstance(store, str):
            try:
                store = open_store(store)
            except ConfigError as exc:
                raise ConfigError(f"{source['store']}: {exc}") from None
        elif not isinstance(store, Store):
            raise ConfigError(f"{source['store']} must be a store URL or a leasecron Store, not {store!r}")
        try:
            return LeaseCron(store, **settings), opened
        except ConfigError as exc:
            if opened:
                store.close()
            raise ConfigError(f"leasecron settings of Flask app {app.name!r}: {_without_prefix(exc)}") from None


def _in_app_context(app: Flask, func: Handler) -> Handler:
    """``func`` run inside ``app.app_context()``; its signature (context or none) and name stay."""

    @functools.wraps(func)
    def in_app_context(*args: Any, **kwargs: Any) -> Any:
        with app.app_context():
            return func(*args, **kwargs)

    return in_app_context


def _callback_in_app_context(app: Flask, callback: Callback) -> Callback:
    def in_app_context(event: Event) -> None:
        with app.app_context():
            callback(event)

    return in_app_context


def _coerce(key: str, name: str, value: Any) -> Any:
    """A config value as the option takes it: digits given as text (from the environment) become ints."""
    if name in _TEXT_OPTIONS or not isinstance(value, str):
        return value
    text = value.strip().replace("_", "")
    if text.lstrip("-").isdigit():
        return int(text)
    raise ConfigError(f"Flask config {key} must be an integer, not {value!r}")


def _nearest(word: str, known: Any) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _without_prefix(exc: Exception) -> str:
    text = str(exc)
    return text[len("LeaseCron: "):] if text.startswith("LeaseCron: ") else text
