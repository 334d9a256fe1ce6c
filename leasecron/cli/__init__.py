"""The ``leasecron`` command (also ``python -m leasecron``): :func:`build_parser` and :func:`main`.

Each subcommand calls one function of :mod:`~leasecron.cli.commands` (``runs``, ``jobs``,
``check``, ``run``), :mod:`~leasecron.cli.controls` (``pause``, ``resume``, ``trigger``),
:mod:`~leasecron.cli.schedules` (``reschedule``, ``put``, ``delete``),
:mod:`~leasecron.cli.instances`, :mod:`~leasecron.cli.show`,
:mod:`~leasecron.cli.dashboard` or :mod:`~leasecron.cli.demo`; the ``flask leasecron`` group
calls the same functions. Expected errors print one line on stderr: a bad option, URL or
``module:attr`` (:class:`~leasecron.ConfigError`) exits with 2, a failed command with 1.
``docs/operating.rst`` (Command line) lists the commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional, Tuple

from .. import __version__
from ..errors import ConfigError, LeaseCronError
from . import commands, controls, dashboard, demo, instances, schedules, show

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``leasecron`` command."""
    parser = argparse.ArgumentParser(
        prog="leasecron",
        description="leasecron: cron jobs in a cluster, each slot run exactly once, on one instance.",
    )
    parser.add_argument("--version", action="version", version=f"leasecron {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = _command(
        sub,
        "demo",
        "watch 3 worker processes share a job: claims, a crash and takeover, a hand-over",
        "Run 3 real worker processes on one store with a job every 2 s; SIGKILL one runner mid-job and SIGTERM"
        " another, and show that every slot still ran exactly once.",
    )
    demo.add_argument("--seconds", type=float, default=30.0, help="how long the demo runs (default: 30)")
    demo.add_argument(
        "--store", metavar="URL", help="a store URL the workers share (default: a temporary SQLite file)"
    )

    runs = _command(sub, "runs", "list the stored runs, newest first", "List the stored runs." + _READS_ONLY)
    _url_argument(runs)
    runs.add_argument("--job", metavar="NAME", help="only this job (default: every job with stored runs)")
    runs.add_argument("--limit", type=int, default=20, metavar="N", help="runs per job (default: 20)")
    _json_argument(runs, "a JSON list of the runs (with their attempts)")

    jobs = _command(
        sub,
        "jobs",
        "list the jobs: last run, stored runs, paused or not, pending manual runs, stored schedules, next slot",
        "List each job with stored runs, or paused, or with requests for manual runs, or with a schedule stored"
        " in the store: its last run, how many runs the store keeps, who paused it, when and why, its pending"
        " manual runs, and its stored schedule (an override of a code job's, or a stored job: task, kwargs,"
        " version) with its next slot. The store holds no schedules of the code's jobs: --app module:attr (a"
        " LeaseCron, or a Flask app with LeaseCronExtension) adds each registered job's schedule and next slot."
        + _READS_ONLY,
    )
    _url_argument(jobs, "store URL (default: the store of --app's LeaseCron)")
    jobs.add_argument("--app", metavar="module:attr", help="the LeaseCron (or Flask app) that registers the jobs")
    _json_argument(jobs, "a JSON list of the jobs")

    show = _command(
        sub,
        "show",
        "show one run: every field, and every attempt with its error in full",
        "Print the run of JOB at SLOT: every field, then its attempts, oldest first (runner, reason, start,"
        " end, outcome), and each error in full." + _READS_ONLY,
    )
    _url_argument(show)
    _job_argument(show)
    show.add_argument(
        "slot", metavar="SLOT", help="the run's slot: epoch ms (1764625203123) or ISO 8601 (2026-12-01T21:40:03Z;"
        " without an offset, UTC)"
    )  # fmt: skip
    _json_argument(show, "the run as a JSON object (with its attempts)")

    pause = _command(
        sub,
        "pause",
        "pause a job on every instance: its new slots are skipped until resume",
        "Mark JOB paused in the store, with who paused it, when and why: every instance skips its new scheduled"
        " and catch-up slots until `leasecron resume`. A run that is running goes on; a triggered run still"
        " runs." + _WRITES,
    )
    _url_argument(pause)
    _job_argument(pause)
    pause.add_argument("--note", metavar="TEXT", help="why it is paused (shown by `leasecron jobs`)")
    _by_argument(pause)
    _json_argument(pause, "the job's state as a JSON object")

    resume = _command(
        sub,
        "resume",
        "resume a paused job: its next slot runs as usual",
        "Clear the pause of JOB: its next slot runs as usual; the slots skipped while it was paused are not"
        " caught up." + _WRITES,
    )
    _url_argument(resume)
    _job_argument(resume)
    _by_argument(resume)
    _json_argument(resume, "the job's state as a JSON object")

    trigger = _command(
        sub,
        "trigger",
        "run a job once now, on one instance; --wait for its end",
        "Ask for one manual run of JOB now (reason 'manual', slot = the store's clock) and print its slot. One"
        " started instance that registers the job runs it, within its poll_ms; unclaimed, the request expires"
        " max_late_ms + 10 s later. It runs even while the job is paused, and obeys its overlap setting. With"
        " --wait, wait for the run to end: exit 0 when it succeeded, 1 when it failed, was interrupted or"
        " skipped, the request expired, or the wait timed out." + _WRITES,
    )
    _url_argument(trigger)
    _job_argument(trigger)
    trigger.add_argument(
        "--max-late-ms", type=int, default=30_000, metavar="N",
        help="how long an instance may take to claim it, plus 10 s (default: 30000)",
    )  # fmt: skip
    trigger.add_argument("--wait", action="store_true", help="wait for the run to end; the exit code says how")
    trigger.add_argument(
        "--timeout", type=float, metavar="SECONDS",
        help=f"with --wait: give up after this long, the run going on (default: {controls.DEFAULT_WAIT_S:.0f})",
    )  # fmt: skip
    _by_argument(trigger)
    _json_argument(trigger, "a JSON object: the request, and with --wait the result and the run")

    reschedule = _command(
        sub,
        "reschedule",
        "override a code job's schedule on every instance, or --reset it to the code's",
        "Store EXPR as JOB's schedule (a cron string, or a plain number: an interval in seconds) in place of its"
        " code's, on every instance: each applies it within its poll_ms, and from now on no instance starts a slot"
        " of the schedule it replaced. --tz defaults to the job's own zone. --reset goes back to the code's"
        " schedule. A job stored whole is changed with `leasecron put`." + _WRITES,
    )
    _url_argument(reschedule)
    _job_argument(reschedule)
    reschedule.add_argument("expr", nargs="?", metavar="EXPR", help="a cron string ('*/10 * * * *') or seconds ('90')")
    reschedule.add_argument("--tz", metavar="TZ", help="the zone EXPR is read in (default: the job's own)")
    reschedule.add_argument("--reset", action="store_true", help="go back to the schedule in the code")
    _by_argument(reschedule)
    _json_argument(reschedule, "the stored record as a JSON object")

    put = _command(
        sub,
        "put",
        "store a whole job: a task (cron.task), its schedule, kwargs and options",
        "Create or replace the stored job NAME: every instance that registers TASK (cron.task) runs it on EXPR (a"
        " cron string, or a plain number: seconds) with the JSON --kwargs as keyword arguments, from its next"
        " poll; an instance without the task leaves it to the others. The schedule, zone, kwargs and options"
        " are checked (with leasecron's defaults for the options not given) before anything is stored."
        + _WRITES,
    )
    _url_argument(put)
    put.add_argument("job", metavar="NAME", help="the stored job's name (never a job's in code)")
    put.add_argument("--task", required=True, metavar="TASK", help="the task that runs it (cron.task's name)")
    put.add_argument("--schedule", required=True, metavar="EXPR", help="a cron string, or seconds ('90')")
    put.add_argument("--tz", metavar="TZ", help="the zone EXPR is read in (default: the instances' tz)")
    put.add_argument("--kwargs", metavar="JSON", help="the handler's keyword arguments, a JSON object")
    put.add_argument(
        "--option", action="append", metavar="NAME=VALUE",
        help="a job option (lease_ms=60000, overlap=allow, timeout_ms=600000, ...); VALUE is JSON or text; repeat it",
    )  # fmt: skip
    _by_argument(put)
    _json_argument(put, "the stored job as a JSON object")

    delete = _command(
        sub,
        "delete",
        "delete a stored job on every instance",
        "Delete the stored job NAME: no instance starts a new run of it from now on; a run that is running goes"
        " on. A name the store holds no stored job of is an error." + _WRITES,
    )
    _url_argument(delete)
    delete.add_argument("job", metavar="NAME", help="the stored job's name")
    _by_argument(delete)
    _json_argument(delete, "the store's record as a JSON object")

    live = _command(
        sub,
        "instances",
        "list the live instances: runner, host, pid, version, and the jobs and tasks each registers",
        "List the instances that announced themselves in the store in the last 30 s (a started instance does"
        " every 10 s; a stopped one is removed): runner, host, pid, leasecron version, start, last refresh, and"
        " the jobs (with the schedules in its code) and tasks each registers." + _READS_ONLY,
    )
    _url_argument(live)
    _json_argument(live, "a JSON list of the live instances")

    check = _command(
        sub,
        "check",
        "check a store: connectivity, schema, clock offset, round-trip time; with --app, overdue jobs",
        "Open the store, create its schema if it is missing (as an instance would), and measure its clock"
        " offset and round trip. With --app, also watch every job the app knows (registered, or stored):"
        " exit 1 naming each overdue job (a slot due more than max_late_ms + 10 s ago, after its newest"
        " stored run, has no run; not paused), and with --failed each job whose last run failed.",
    )
    _url_argument(check, "store URL (default: the store of the --app's LeaseCron)")
    check.add_argument("--app", metavar="module:attr", help="the app's LeaseCron (or Flask app): its jobs are watched")
    check.add_argument(
        "--failed", action="store_true", help="also exit 1 naming each job whose last run failed (of the app's jobs)"
    )
    _json_argument(check, "a JSON object: the store's figures, and with --app every job watched")

    run = _command(
        sub,
        "run",
        "run a LeaseCron object from an importable module until SIGTERM",
        "Import module:attr (the current directory is on sys.path), which must be a leasecron.LeaseCron (or a"
        " Flask app with LeaseCronExtension; module:factory() calls a factory), and run it until SIGTERM or"
        " SIGINT (graceful stop: live runs are handed over); a second signal stops at once.",
    )
    run.add_argument("target", metavar="module:attr", help="e.g. myapp.tasks:cron")
    run.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="level of the leasecron log on stderr (default: INFO)",
    )

    served = _command(
        sub,
        "dashboard",
        "serve the dashboard: every job, its runs and their attempts, pause, resume and trigger, in a browser",
        "Serve the dashboard's pages and JSON API (leasecron.contrib.dashboard; needs the dashboard extra) with"
        " gunicorn (1 worker, threads) when it is installed, else Werkzeug's threaded server, until SIGTERM or"
        " Ctrl-C. It listens on 127.0.0.1 by default; any address that is not loopback requires a password"
        " (HTTP basic authentication). Creates no store: a store that does not exist or has no schema yet is an"
        " error naming what is missing.",
    )
    dashboard.add_arguments(served)
    return parser


#: Said by every command that only reads the store.
_READS_ONLY = " Reads the store and creates nothing: a store that does not exist is an error naming what is missing."
#: Said by every command that writes to the store.
_WRITES = (
    " Creates no store: a store that does not exist (a mistyped URL) is an error naming what is missing; an"
    " instance, or `leasecron check URL`, creates it."
)


def verbs() -> Dict[str, Tuple[str, argparse.ArgumentParser]]:
    """The command's verbs, in order: each one's summary (as ``leasecron --help`` shows it) and its
    parser, from :func:`build_parser` (for the integrations that offer the same verbs, such as
    ``manage.py leasecron``, and for the docs' tests). argparse keeps them in its private
    ``_SubParsersAction``: this is the one place that reads it."""
    parser = build_parser()
    (sub,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    return {name: (summaries[name], verb) for name, verb in sub.choices.items()}


def _command(sub: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand: ``summary`` in ``leasecron --help``, ``description`` in its own."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=description)
    return parser


def _url_argument(parser: argparse.ArgumentParser, optional: Optional[str] = None) -> None:
    """The store URL: required, or (``optional`` is its help) one that may be left out."""
    if optional is None:
        parser.add_argument("url", metavar="URL", help="store URL, e.g. sqlite:///leasecron.db")
    else:
        parser.add_argument("url", nargs="?", metavar="URL", help=optional)


def _job_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's name")


def _by_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--by", metavar="WHO", help="who acts, as the store records it (default: user@host of this process)"
    )


def _json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` (``"a JSON list of the runs"``) instead of the text."""
    parser.add_argument("--json", action="store_true", help=f"print {what}")


def main(argv: Optional[List[str]] = None) -> int:
    """Run the ``leasecron`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    handlers = {
        "demo": demo.cmd_demo,
        "runs": commands.cmd_runs,
        "jobs": commands.cmd_jobs,
        "show": show.cmd_show,
        "pause": controls.cmd_pause,
        "resume": controls.cmd_resume,
        "trigger": controls.cmd_trigger,
        "reschedule": schedules.cmd_reschedule,
        "put": schedules.cmd_put,
        "delete": schedules.cmd_delete,
        "instances": instances.cmd_instances,
        "check": commands.cmd_check,
        "run": commands.cmd_run,
        "dashboard": dashboard.cmd_dashboard,
    }
    try:
        return handlers[args.command](args)
    except ConfigError as exc:
        print(f"leasecron {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except (commands.CommandError, LeaseCronError) as exc:
        print(f"leasecron {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"leasecron {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (libpq's span several: "Connection refused\n\tIs the server ...")."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
