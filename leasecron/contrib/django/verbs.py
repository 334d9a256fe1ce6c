"""The verbs of ``manage.py leasecron``: each calls the function the ``leasecron`` command calls
(:mod:`~leasecron.cli.commands`, :mod:`~leasecron.cli.controls`, :mod:`~leasecron.cli.schedules`,
:mod:`~leasecron.cli.show`, :mod:`~leasecron.cli.instances`, :mod:`~leasecron.cli.dashboard`) with
the project's store and jobs, as ``flask leasecron`` does with an app's.

Each verb takes the project's cron, the parsed options (by the ``leasecron`` command's names:
``json``, ``job``, ``by``, ...), a function that prints a line and one that prints a warning;
it returns its exit code (None: 0). ``pause``, ``resume``, ``trigger`` and ``reschedule`` refuse a
job the project does not register; ``put`` a name the project registers in code, and checks the
kwargs against the project's task and the options with the project's defaults, as ``cron.put_job``
does. Expected failures raise :class:`~leasecron.ConfigError` (exit 2) or
:class:`~leasecron.LeaseCronError` / :class:`~leasecron.cli.commands.CommandError` (exit 1).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Mapping, Optional

from django.conf import settings  # type: ignore[import-untyped]

from ...cli import commands, controls, dashboard as served, instances, schedules, show
from ...cron import LeaseCron
from ...errors import ConfigError
from ...jobs import check_kwargs

__all__ = ["VERBS", "Emit", "Verb", "label"]

Emit = Callable[[str], None]
#: A verb: ``verb(cron, options, emit, warn)`` -> exit code (None: 0).
Verb = Callable[[LeaseCron, Mapping[str, Any], Emit, Emit], Optional[int]]


def label() -> str:
    """How the messages name the project's cron: ``the cron of Django project mysite.settings``."""
    return f"the cron of Django project {getattr(settings, 'SETTINGS_MODULE', None) or '(settings configured in code)'}"


def _lines(emit: Emit, lines: Any) -> None:
    for line in lines:
        emit(line)


def _runs(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    _lines(emit, commands.runs_output(cron.store, o["job"], o["limit"], o["json"]))


def _jobs(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    _lines(emit, commands.jobs_output(cron.store, cron, o["json"]))


def _show(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    _lines(emit, show.show_output(cron.store, o["job"], show.parse_slot(o["slot"]), o["json"]))


def _instances(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    _lines(emit, instances.instances_output(cron.store, o["json"]))


def _check(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> int:
    lines, code = commands.check_report(cron.store, cron, failed=o["failed"], as_json=o["json"])
    _lines(emit, lines)
    return code


def _pause(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    controls.check_registered(o["job"], cron.jobs, "pause")
    _lines(emit, controls.pause_output(cron.store, o["job"], controls.actor(o["by"]), o["note"], o["json"]))


def _resume(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    controls.check_registered(o["job"], cron.jobs, "resume")
    _lines(emit, controls.resume_output(cron.store, o["job"], controls.actor(o["by"]), o["json"]))


def _trigger(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> int:
    job = o["job"]
    controls.check_registered(job, cron.jobs, "trigger")
    wait_s = controls.wait_seconds(o["wait"], o["timeout"])
    late = o["max_late_ms"] if o["max_late_ms"] is not None else cron.jobs[job].options.max_late_ms
    return controls.trigger(
        cron.store, job, by=controls.actor(o["by"]), max_late_ms=late, wait_s=wait_s, as_json=o["json"], emit=emit,
        warn=warn,
    )  # fmt: skip


def _reschedule(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    expr = o["expr"]
    if (expr is None) == (not o["reset"]):
        raise ConfigError("give EXPR (a cron string, or an interval in seconds) or --reset, not both or neither")
    controls.check_registered(o["job"], cron.jobs, "reschedule")
    schedule = schedules.schedule_arg(expr) if expr is not None else None
    by = controls.actor(o["by"])
    _lines(emit, schedules.reschedule_output(cron.store, o["job"], by, schedule, o["tz"], o["json"]))


def _put(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    name, task = o["job"], o["task"]
    kwargs, options = schedules.parse_kwargs(o["kwargs"]), schedules.parse_options(o["option"] or ())
    if name in cron.jobs:
        raise ConfigError(f"{name!r} is a job of the project, in code: use `manage.py leasecron reschedule`")
    found = cron.tasks.get(task)
    if found is not None:
        check_kwargs(found, kwargs or {}, name)
    _lines(emit, schedules.put_output(
        cron.store, name, controls.actor(o["by"]), task=task, schedule=schedules.schedule_arg(o["schedule"]),
        tz=o["tz"], kwargs=kwargs, options=options, as_json=o["json"], defaults=commands.app_defaults(cron),
    ))  # fmt: skip


def _delete(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    _lines(emit, schedules.delete_output(cron.store, o["job"], controls.actor(o["by"]), o["json"]))


def _run(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    commands.run_cron(cron, label(), o["log_level"].upper())


def _dashboard(cron: LeaseCron, o: Mapping[str, Any], emit: Emit, warn: Emit) -> None:
    """``leasecron dashboard --app`` on the project: its store, read and never created, and its jobs."""
    password = served.password_from(o["password"], os.environ)
    host = served.check_listen(o["host"], o["port"], password)
    try:
        from ..dashboard import create_app
    except ImportError:
        raise ConfigError(f"the dashboard needs Flask, which is not installed: {served.INSTALL_HINT}") from None
    store = cron.store
    with commands.reading(store):  # for as long as it serves: it creates nothing
        with controls.creating_nothing("dashboard"):
            store.jobs()  # a store without its schema is an error now, not an empty page
        app = create_app(store, cron=cron, read_only=o["read_only"], password=password)
        mode = "read-only" if o["read_only"] else "actions allowed"
        guard = "password required" if password is not None else "no password"
        served.serve(app, host, o["port"], f"{mode}; {guard}; store {store!r}, jobs of {label()}")


#: Every verb by name, in the order ``manage.py leasecron --help`` lists them.
VERBS: Dict[str, Verb] = {
    "runs": _runs,
    "jobs": _jobs,
    "show": _show,
    "pause": _pause,
    "resume": _resume,
    "trigger": _trigger,
    "reschedule": _reschedule,
    "put": _put,
    "delete": _delete,
    "instances": _instances,
    "check": _check,
    "run": _run,
    "dashboard": _dashboard,
}
