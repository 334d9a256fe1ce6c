"""The ``flask leasecron`` commands: the operators' commands of :mod:`leasecron.cli` on a Flask
app's own cron, and :func:`cron_of`, which finds that cron.

Each command calls the function the ``leasecron`` command calls (:mod:`~leasecron.cli.commands`,
:mod:`~leasecron.cli.controls`, :mod:`~leasecron.cli.schedules`), with the app's store and jobs:
``pause``, ``resume``, ``trigger`` and ``reschedule`` refuse a job the app does not register,
``put`` a name the app registers in code (and checks the kwargs against the app's task, the
options with the app's defaults, as ``cron.put_job`` does), and they write to the app's store as the app
opened it (its URL is the app's configuration, not an operator's typing). :doc:`The Flask guide
<flask>` lists the commands.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

try:
    import click
    from flask import Flask, current_app
    from flask.cli import AppGroup
except ImportError as exc:  # pragma: no cover - the test environment has Flask
    raise ImportError(f"leasecron.contrib.flask needs Flask: pip install 'leasecron[flask]' ({exc})") from exc

from ..cli import commands, controls, instances, schedules, show
from ..cron import LeaseCron
from ..errors import ConfigError, LeaseCronError
from ..jobs import check_kwargs

__all__ = ["EXTENSION_KEY", "cli", "cron_of"]

#: Where ``init_app`` puts the app's LeaseCron: ``app.extensions["leasecron"]``.
EXTENSION_KEY = "leasecron"


def cron_of(app: Flask) -> LeaseCron:
    """The LeaseCron in ``app.extensions["leasecron"]``; ConfigError if ``init_app`` was never called."""
    cron = app.extensions.get(EXTENSION_KEY)
    if not isinstance(cron, LeaseCron):
        raise ConfigError(f"Flask app {app.name!r} has no leasecron: call LeaseCronExtension().init_app(app)")
    return cron


# -- flask leasecron ... -------------------------------------------------------------------------


class _UsageProblem(click.ClickException):
    """A bad option or setting: exit code 2, as the ``leasecron`` command."""

    exit_code = 2


def _command(func: Callable[..., Optional[int]]) -> Callable[..., None]:
    """The body of a ``flask leasecron`` command: its expected failures as one line (exit 2 for a
    bad option or setting, 1 for the rest), and the exit code it returns (``trigger --wait``)."""

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> None:
        try:
            code = func(*args, **kwargs)
        except ConfigError as exc:
            raise _UsageProblem(str(exc)) from exc
        except (LeaseCronError, commands.CommandError) as exc:
            raise click.ClickException(str(exc)) from exc
        if code:
            click.get_current_context().exit(code)

    return command


def _echo(lines: List[str]) -> None:
    for line in lines:
        click.echo(line)


def _json(what: str) -> Callable[[Any], Any]:
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what}.")


_by = click.option("--by", metavar="WHO", help="Who acts, as the store records it (default: user@host).")
_job = click.argument("job")

cli = AppGroup("leasecron", help="leasecron: the app's cron jobs, their stored runs, and the store.")


@cli.command("runs", short_help="List the stored runs, newest first.")
@click.option("--job", metavar="NAME", help="Only this job (default: every job with stored runs).")
@click.option("--limit", type=int, default=20, show_default=True, metavar="N", help="Runs per job.")
@_json("a JSON list of runs")
@_command
def _runs(job: Optional[str], limit: int, as_json: bool) -> None:
    """List the stored runs, grouped by job, newest first, with their attempts."""
    _echo(commands.runs_output(cron_of(current_app).store, job, limit, as_json))


@cli.command("jobs", short_help="List the jobs: last run, pause, stored schedules, next slot.")
@_json("a JSON list of jobs")
@_command
def _jobs(as_json: bool) -> None:
    """List the app's jobs and the store's stored schedules: schedule (an override shown), last run,
    stored runs, pause, pending manual runs, next slot."""
    cron = cron_of(current_app)
    _echo(commands.jobs_output(cron.store, cron, as_json))


@cli.command("instances", short_help="List the live instances and what each registers.")
@_json("a JSON list of the live instances")
@_command
def _instances(as_json: bool) -> None:
    """List the instances that announced themselves in the app's store in the last 30 s: runner, host,
    pid, version, and the jobs and tasks each registers."""
    _echo(instances.instances_output(cron_of(current_app).store, as_json))


@cli.command("show", short_help="Show one run with every attempt.")
@_job
@click.argument("slot")
@_json("the run as a JSON object")
@_command
def _show(job: str, slot: str, as_json: bool) -> None:
    """Show the run of JOB at SLOT (epoch ms, or ISO 8601: without an offset, UTC): every field,
    every attempt, errors in full."""
    _echo(show.show_output(cron_of(current_app).store, job, show.parse_slot(slot), as_json))


@cli.command("pause", short_help="Pause a job on every instance.")
@_job
@click.option("--note", metavar="TEXT", help="Why it is paused (shown by `jobs`).")
@_by
@_json("the job's state as a JSON object")
@_command
def _pause(job: str, note: Optional[str], by: Optional[str], as_json: bool) -> None:
    """Pause JOB on every instance: its new slots are skipped until `flask leasecron resume`; a
    run that is running goes on, a triggered run still runs."""
    cron = cron_of(current_app)
    controls.check_registered(job, cron.jobs, "pause")
    _echo(controls.pause_output(cron.store, job, controls.actor(by), note, as_json))


@cli.command("resume", short_help="Resume a paused job.")
@_job
@_by
@_json("the job's state as a JSON object")
@_command
def _resume(job: str, by: Optional[str], as_json: bool) -> None:
    """Resume JOB: its next slot runs as usual (the skipped slots are not caught up)."""
    cron = cron_of(current_app)
    controls.check_registered(job, cron.jobs, "resume")
    _echo(controls.resume_output(cron.store, job, controls.actor(by), as_json))


@cli.command("trigger", short_help="Run a job once now, on one instance.")
@_job
@click.option("--max-late-ms", type=int, metavar="N", help="Claimed within N ms + 10 s (default: the job's).")
@click.option("--wait", is_flag=True, help="Wait for the run to end: exit 0 only if it succeeded.")
@click.option("--timeout", type=float, metavar="SECONDS", help="With --wait: give up after this long (3600).")
@_by
@_json("a JSON object: the request, and with --wait the result and the run")
@_command
def _trigger(
    job: str, max_late_ms: Optional[int], wait: bool, timeout: Optional[float], by: Optional[str], as_json: bool
) -> int:
    """Run JOB once now, on one started instance of the app, and print its slot; with --wait, wait
    for its end (exit 1 when it failed, or no instance claimed it in max_late_ms + 10 s)."""
    cron = cron_of(current_app)
    controls.check_registered(job, cron.jobs, "trigger")
    wait_s = controls.wait_seconds(wait, timeout)
    late = max_late_ms if max_late_ms is not None else cron.jobs[job].options.max_late_ms
    by = controls.actor(by)
    return controls.trigger(cron.store, job, by=by, max_late_ms=late, wait_s=wait_s, as_json=as_json, emit=click.echo)


@cli.command("reschedule", short_help="Override a job's schedule on every instance, or --reset it.")
@_job
@click.argument("expr", required=False)
@click.option("--tz", metavar="TZ", help="The zone EXPR is read in (default: the job's own).")
@click.option("--reset", is_flag=True, help="Go back to the schedule in the code.")
@_by
@_json("the stored record as a JSON object")
@_command
def _reschedule(job: str, expr: Optional[str], tz: Optional[str], reset: bool, by: Optional[str],
                as_json: bool) -> None:  # fmt: skip
    """Store EXPR (a cron string, or a plain number: seconds) as JOB's schedule on every instance, in
    place of its code's; --reset goes back to the code's."""
    cron = cron_of(current_app)
    if (expr is None) == (not reset):
        raise ConfigError("give EXPR (a cron string, or an interval in seconds) or --reset, not both or neither")
    controls.check_registered(job, cron.jobs, "reschedule")
    schedule = schedules.schedule_arg(expr) if expr is not None else None
    _echo(schedules.reschedule_output(cron.store, job, controls.actor(by), schedule, tz, as_json))


@cli.command("put", short_help="Store a whole job: a task, its schedule, kwargs and options.")
@click.argument("name")
@click.option("--task", required=True, metavar="TASK", help="The task that runs it (ext.task's name).")
@click.option("--schedule", "expr", required=True, metavar="EXPR", help="A cron string, or seconds.")
@click.option("--tz", metavar="TZ", help="The zone EXPR is read in (default: the app's tz).")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="The handler's keyword arguments, a JSON object.")
@click.option("--option", "option_items", multiple=True, metavar="NAME=VALUE", help="A job option (repeat it).")
@_by
@_json("the stored job as a JSON object")
@_command
def _put(name: str, task: str, expr: str, tz: Optional[str], kwargs_json: Optional[str],
         option_items: Tuple[str, ...], by: Optional[str], as_json: bool) -> None:  # fmt: skip
    """Create or replace the stored job NAME: every instance with TASK runs it on EXPR, with --kwargs."""
    cron = cron_of(current_app)
    kwargs, options = schedules.parse_kwargs(kwargs_json), schedules.parse_options(option_items)
    if name in cron.jobs:
        raise ConfigError(f"{name!r} is a job of the app, in code: use `flask leasecron reschedule`")
    found = cron.tasks.get(task)
    if found is not None:
        check_kwargs(found, kwargs or {}, name)
    _echo(schedules.put_output(cron.store, name, controls.actor(by), task=task, schedule=schedules.schedule_arg(expr),
                               tz=tz, kwargs=kwargs, options=options, as_json=as_json,
                               defaults=commands.app_defaults(cron)))  # fmt: skip


@cli.command("delete", short_help="Delete a stored job on every instance.")
@click.argument("name")
@_by
@_json("the store's record as a JSON object")
@_command
def _delete(name: str, by: Optional[str], as_json: bool) -> None:
    """Delete the stored job NAME: no instance starts a new run of it; a run that is running goes on."""
    _echo(schedules.delete_output(cron_of(current_app).store, name, controls.actor(by), as_json))


@cli.command("check", short_help="Check the store (schema, clock, round trip) and the jobs: exit 1 if one is overdue.")
@click.option("--failed", is_flag=True, help="Also exit 1 when a job's last run failed.")
@_json("a JSON object: the store's figures and every job watched")
@_command
def _check(failed: bool, as_json: bool) -> int:
    """Check the app's store (connectivity, schema, clock offset, round trip) and watch every job
    the app knows: exit 1 naming each overdue job (a slot due more than max_late_ms + 10 s ago
    has no run), and with --failed each job whose last run failed."""
    cron = cron_of(current_app)
    lines, code = commands.check_report(cron.store, cron, failed=failed, as_json=as_json)
    _echo(lines)
    return code


@cli.command("run", short_help="Run the cron until SIGTERM.")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Level of the leasecron log on stderr.",
)
@_command
def _run(log_level: str) -> None:
    """Run the app's cron in the foreground until SIGTERM (a second signal: at once)."""
    cron = cron_of(current_app)
    commands.run_cron(cron, f"the cron of Flask app {current_app.name!r}", log_level.upper())
