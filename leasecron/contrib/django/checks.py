"""The system checks of ``leasecron.contrib.django`` (tag ``leasecron``): ``manage.py check``
reports each problem of ``settings.LEASECRON`` as an error (``leasecron.E001`` to ``E006``,
see :data:`~leasecron.contrib.django.conf.PROBLEM_IDS`), and a store that does not answer as
the warning ``leasecron.W001``.

A warning, not an error: Django runs the checks before ``migrate``, ``runserver`` and most
management commands, and a store that is down for a moment must not stop a deployment's
migrations (an instance waits for the store and retries on its own). The store is asked one
question, its clock (:meth:`~leasecron.Store.now_ms`: a round trip to a server, nothing created
nor written), in a thread of its own, and the check waits for the answer at most
:data:`PROBE_TIMEOUT_S`: a server that does not answer costs each command that long, never more.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence

from django.apps import AppConfig, apps  # type: ignore[import-untyped]
from django.core import checks  # type: ignore[import-untyped]

from .conf import Problem, Settings, read_settings

__all__ = ["TAG", "PROBE_TIMEOUT_S", "check_leasecron", "probe", "message_of"]

#: The tag of the checks: ``manage.py check --tag leasecron`` runs them alone.
TAG = "leasecron"
#: The longest the store check waits for the store's answer, in seconds.
PROBE_TIMEOUT_S = 2.0


def check_leasecron(app_configs: Optional[Sequence[AppConfig]] = None, **kwargs: Any) -> List[checks.CheckMessage]:
    """The check Django runs: each problem of ``settings.LEASECRON``; if there is none, whether
    the store answers within :data:`PROBE_TIMEOUT_S`."""
    if app_configs is not None and apps.get_app_config("leasecron") not in app_configs:
        return []
    settings, problems = read_settings()
    if settings is not None:
        why = probe(settings)
        if why is not None:
            problems = [
                Problem(
                    "leasecron.W001",
                    f"the store {settings.shown_store()} does not answer: {why}",
                    "instances wait for it and retry; `manage.py leasecron check` checks it in full",
                )
            ]
    return [message_of(problem) for problem in problems]


def message_of(problem: Problem) -> checks.CheckMessage:
    """``problem`` as Django's :class:`~django.core.checks.Error` or :class:`~django.core.checks.Warning`."""
    kind = checks.Error if problem.is_error else checks.Warning
    return kind(problem.message, hint=problem.hint, id=problem.id)


def probe(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Ask the store its clock, waiting ``timeout_s`` at most: None when it answered, else why not.

    A store given as a URL is opened for this question alone (creating nothing) and closed; a
    store given as an object is asked as it is. The question runs in a daemon thread: when the
    wait ends first, it is left to end with the store's own timeout, holding nothing of the
    project's cron.
    """
    outcome: List[Optional[str]] = []

    def ask() -> None:
        try:
            store, opened = settings.open_store(create=False)
            try:
                store.now_ms()
            finally:
                if opened:
                    store.close()
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            outcome.append(f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        else:
            outcome.append(None)

    asker = threading.Thread(target=ask, name="leasecron-check", daemon=True)
    asker.start()
    asker.join(timeout_s)
    if not outcome:
        return f"no answer within {timeout_s:g} s"
    return outcome[0]
