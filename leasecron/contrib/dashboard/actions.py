"""The three actions, shared by the pages' forms and the API: pause, resume, trigger.

Each writes to the store at once (rules 18 and 19), so it acts on every
instance, also from a dashboard process that runs no job. They act on any
job name, like ``leasecron pause URL JOB``: the store holds no list of jobs,
and a job of another application may be paused from here. A trigger's
request expires after the job's ``max_late_ms`` (+ 10 s) when the
application's cron registers the job, else after the default 30 s.

:func:`act` returns the sentence the page flashes and the object the API
answers, so that both say the same thing.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ...formatting import format_duration, utc_time
from ...options import DEFAULTS
from .settings import DashboardError, Settings

__all__ = ["ACTIONS", "act", "check_writable"]

#: The actions, as they appear in URLs (``/jobs/<job>/pause``) and endpoint names.
ACTIONS = ("pause", "resume", "trigger")


def check_writable(settings: Settings) -> None:
    """Refuse (:class:`DashboardError`, 403) on a read-only dashboard: every action and schedule
    change, form or API."""
    if settings.read_only:
        raise DashboardError(403, "this dashboard is read-only: pause, resume, trigger and changes of schedules are"
                                  " turned off")


def act(
    settings: Settings, action: str, job: str, by: str, note: Optional[str] = None
) -> Tuple[str, Dict[str, object]]:
    """Carry out ``action`` on ``job`` as ``by``; the flash message and the API's answer.

    A read-only dashboard refuses (:class:`DashboardError`, 403); a bad name or note is a
    :class:`~leasecron.ConfigError` naming it, from the store's checks.
    """
    check_writable(settings)
    store = settings.store
    if action == "pause":
        state = store.pause(job, by=by, note=note or None)
        why = f": {state.note}" if state.note else ""
        return f"Paused job {job!r} (by {by}){why}. Every instance skips its new slots until it is resumed.", (
            state.to_dict()
        )
    if action == "resume":
        was_paused = store.job_state(job).paused
        state = store.resume(job, by=by)
        if not was_paused:
            return f"Job {job!r} was not paused: nothing changed.", state.to_dict()
        return f"Resumed job {job!r} (by {by}): its next slot runs as usual.", state.to_dict()
    if action == "trigger":
        registered = settings.cron.jobs.get(job) if settings.cron is not None else None
        max_late_ms = registered.options.max_late_ms if registered is not None else int(DEFAULTS["max_late_ms"])
        request = store.request_run(job, by=by, max_late_ms=max_late_ms)
        left = format_duration(request.expires_ms - request.slot_ms)
        return (
            f"Requested a manual run of {job!r}: slot {utc_time(request.slot_ms, True)} UTC, by {by};"
            f" an instance that has the job registered claims it (the request expires in {left}).",
            {"slot_ms": request.slot_ms, "request": request.to_dict()},
        )
    raise DashboardError(404, f"no action {action!r}: the actions are {', '.join(ACTIONS)}")
