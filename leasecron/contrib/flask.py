"""Flask: :class:`LeaseCronExtension`, the ``init_app`` extension, and the ``flask leasecron`` commands.

The design, in the usual shape of a Flask extension made for app factories:

* Jobs and event callbacks are registered on the extension (``@ext.job``,
  ``ext.add_job``, ``ext.on``), usually at import time, before any app
  exists. They are checked at once as far as they can be without the app's
  config (the handler, the schedule, each option's value, a duplicate name),
  and fully when an app is initialised.
* :meth:`LeaseCronExtension.init_app` builds one :class:`~leasecron.LeaseCron`
  per app from the app's config (table below), stores it in
  ``app.extensions["leasecron"]``, registers every job on it with a handler
  that runs inside ``app.app_context()`` (so ``current_app``, ``g`` and the
  app's teardown functions, Flask-SQLAlchemy's session clean-up say, work as
  in a request), and adds the ``flask leasecron`` command group to the app.
  A job registered after ``init_app`` goes to the apps already initialised
  too.
* ``init_app`` never starts the cron. Every process that creates the app
  would run jobs: each ``flask`` command, the dev server's reloader process,
  and a gunicorn master that preloads the app. Start it where jobs belong:
  in each gunicorn worker (``post_fork``, see :mod:`leasecron.contrib.gunicorn`),
  in a process of its own (``flask leasecron run``), or by calling
  :meth:`LeaseCronExtension.start` yourself. The cron lives as long as its
  process: no teardown stops it; its exit hook (or gunicorn's ``worker_exit``)
  hands its runs over.

Configuration — one key per option of :class:`~leasecron.LeaseCron`; a key
the app's config holds wins over the same option given to the extension's
constructor (the constructor holds the code's defaults, the config each
deployment's values). A key left out, or set to ``None``, uses the
constructor's value, then leasecron's default:

=============================  ==========  ==================================================
key                            default     meaning
=============================  ==========  ==================================================
``LEASECRON_STORE``            (required)  store URL (``sqlite:///leasecron.db``,
                                           ``redis://…``, ``postgresql://…``) or a ``Store``
``LEASECRON_RUNNER``           host-pid    this instance's name in the store
``LEASECRON_LEASE_MS``         30000       lease of a run; renewed by heartbeats
``LEASECRON_HEARTBEAT_MS``     lease / 6   heartbeat interval (at most 5000 by default)
``LEASECRON_MAX_ATTEMPTS``     3           attempts of a run whose runner died
``LEASECRON_OVERLAP``          ``"skip"``  ``"skip"`` or ``"allow"`` a slot while one runs
``LEASECRON_CATCH_UP_MS``      300000      on start, run a slot missed this recently (0: off)
``LEASECRON_MAX_LATE_MS``      30000       how late a scheduled claim may still start a run
``LEASECRON_JITTER_MS``        1000        random delay before a claim
``LEASECRON_HISTORY_SIZE``     100         finished runs kept per job
``LEASECRON_TZ``               ``"UTC"``   time zone of the cron strings
``LEASECRON_TIMEOUT_MS``       ``None``    a run's time limit (``None``: none), from its start
``LEASECRON_RETRIES``          0           more tries of a handler that raised, same lease
``LEASECRON_RETRY_DELAY_MS``   1000        the first wait between tries, doubled after each
``LEASECRON_STOP_TIMEOUT_MS``  10000       how long ``stop()`` waits for running handlers
``LEASECRON_CLAIM_THREADS``    4           threads that send claims
``LEASECRON_POLL_MS``          1000        how often to look for manual runs (trigger)
=============================  ==========  ==================================================

Integer keys may be strings of digits (values read from the environment).
Any other key that starts with ``LEASECRON_`` is an error naming it (with
the nearest known key), so that a typo never passes silently.

The ``flask leasecron`` group (:mod:`leasecron.contrib.flask_commands`) runs the
commands of :mod:`leasecron.cli.commands` and :mod:`leasecron.cli.controls` on
the app's own cron: ``runs [--job]
[--limit] [--json]``, ``jobs [--json]`` (with each job's schedule, pause and
next slot), ``show JOB SLOT``, ``pause JOB [--note]``, ``resume JOB``,
``trigger JOB [--wait]`` (on the app's jobs only; ``--by`` defaults to
``user@host``; they write to the app's store as the app opened it), ``check``,
and ``run`` (the app's cron in the foreground until SIGTERM: a scheduler
process of its own).
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
from ..jobs import Handler, job_decorator, job_name, job_schedule
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
        """Build the app's :class:`~leasecron.LeaseCron` from its config, with every job registered.

        Stores it in ``app.extensions["leasecron"]`` and returns it; adds the
        ``flask leasecron`` commands. Does not start it (see the module's
        documentation: start it in each gunicorn worker, in ``flask leasecron
        run``, or with :meth:`start`).
        """
        if EXTENSION_KEY in app.extensions:
            raise ConfigError(f"Flask app {app.name!r} already has leasecron (init_app was called on it before)")
        cron, opened = self._build(app)
        try:
            for name, func, schedule, options in self._jobs:
                cron.add_job(_in_app_context(app, func), schedule, name=name, **options)
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
