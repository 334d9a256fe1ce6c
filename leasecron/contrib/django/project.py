"""The project's cron: :class:`DjangoLeaseCron`, built once from ``settings.LEASECRON`` by :func:`get_cron`.

``from leasecron.contrib.django import cron`` gives the object :func:`get_cron` returns: the
package's ``__getattr__`` builds it on the first access (in practice when the first app's
``cron.py`` is imported, as the apps get ready), so importing the package reads no setting, and
the object is a real :class:`~leasecron.LeaseCron` that ``leasecron.contrib.gunicorn.hooks``
and any other part (the dashboard in the URLconf) can take as it is. It is built once per process
from the settings as they are then; a setting with a problem (see
:mod:`~leasecron.contrib.django.conf`) raises :class:`~leasecron.ConfigError` naming it, each time
it is asked for, until the settings are fixed.

Django keeps one database connection per thread, and a connection the database server closed
(a restart, an idle timeout) or older than ``CONN_MAX_AGE`` must be dropped before it is used
again, which Django does around each request. A run is not a request, so :class:`DjangoLeaseCron`
does it around each run: every job handler, task and event callback registered on it is wrapped
(:func:`around_run`) to call :func:`django.db.close_old_connections` before and after it.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any, Callable, Optional

import django  # type: ignore[import-untyped]
from asgiref.sync import sync_to_async
from django.apps import apps  # type: ignore[import-untyped]
from django.db import close_old_connections  # type: ignore[import-untyped]

from ...cron import LeaseCron
from ...errors import ConfigError
from ...events import Callback
from ...jobs import Handler, Job
from ...schedules import ScheduleSpec
from .conf import read_settings

__all__ = ["DjangoLeaseCron", "around_run", "get_cron"]


def around_run(func: Handler) -> Handler:
    """``func`` between two calls of :func:`django.db.close_old_connections`, in the thread that
    runs it (an ``async def`` handler's: awaited through ``sync_to_async``, the thread where its
    ORM calls run). Its name, module and signature stay (``functools.wraps``). A generator function
    is returned as it is, for LeaseCron to refuse with its own message."""
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func) or not callable(func):
        return func
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def awaited_between_closes(*args: Any, **kwargs: Any) -> Any:
            await sync_to_async(close_old_connections)()
            try:
                return await func(*args, **kwargs)
            finally:
                await sync_to_async(close_old_connections)()

        return awaited_between_closes

    @functools.wraps(func)
    def between_closes(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()

    return between_closes


class DjangoLeaseCron(LeaseCron):
    """A :class:`~leasecron.LeaseCron` whose jobs, tasks and event callbacks run between two calls
    of :func:`django.db.close_old_connections` (:func:`around_run`); the rest is LeaseCron's."""

    def add_job(self, func: Handler, schedule: ScheduleSpec, *, name: Optional[str] = None, **options: Any) -> Job:
        """As :meth:`leasecron.LeaseCron.add_job`, the handler wrapped by :func:`around_run`."""
        return super().add_job(around_run(func), schedule, name=name, **options)

    def task(self, name: Optional[str] = None) -> Callable[[Handler], Handler]:
        """As :meth:`leasecron.LeaseCron.task`, the handler wrapped by :func:`around_run`; returns
        the function unchanged."""
        register = super().task(name)

        def register_wrapped(func: Handler) -> Handler:
            register(around_run(func))
            return func

        return register_wrapped

    def on(self, event: str, callback: Callback) -> None:
        """As :meth:`leasecron.LeaseCron.on`, the callback wrapped by :func:`around_run`."""
        if callable(callback) and not inspect.iscoroutinefunction(callback):
            callback = around_run(callback)
        super().on(event, callback)


_lock = threading.Lock()
_cron: Optional[DjangoLeaseCron] = None


def get_cron() -> DjangoLeaseCron:
    """The project's cron, built from ``settings.LEASECRON`` on the first call (and kept).

    Raises :class:`~leasecron.ConfigError` naming the first problem of the setting (``manage.py
    check`` lists them all, each with its id); it builds nothing then, and tries again on the next
    call.

    Asked for in a process where Django is not set up yet (a gunicorn worker's ``post_fork``, which
    resolves ``"leasecron.contrib.django:cron"`` before the worker loads the WSGI application), it
    calls ``django.setup()`` first, so that every app's ``cron`` module is imported and the cron
    has the project's jobs when it starts. While the apps are being loaded (an app's ``cron.py``
    asking for it), it does not.
    """
    global _cron
    if not apps.ready and not apps.loading:
        django.setup(set_prefix=False)  # as get_wsgi_application() calls it; the apps are populated once
    with _lock:
        if _cron is None:
            settings, problems = read_settings()
            if settings is None:
                more = f" ({len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
                first = problems[0]
                hint = f": {first.hint}" if first.hint else ""
                raise ConfigError(f"{first.message}{hint}{more}; `manage.py check` lists each")
            store, opened = settings.open_store()
            try:
                _cron = DjangoLeaseCron(store, **settings.options)
            except ConfigError:  # every problem is found above; this is only a guard
                if opened:
                    store.close()
                raise
        return _cron
