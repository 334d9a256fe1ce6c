"""The ``leasecron`` command (also ``python -m leasecron``).

============================================  ===================================================
``leasecron demo [--seconds N]``              3 worker processes on one SQLite store: claims, a
                                              crash and takeover, a hand-over, and a summary
``leasecron runs URL [--job] [--limit]``      the stored runs, grouped by job, newest first: slot
                                              in local time and UTC, attempt, runner, status,
                                              lease left, hand-over, error (``--json``)
``leasecron jobs [URL] [--app module:attr]``  each job's last run and stored runs; with
                                              ``--app``, its schedule and next slot (``--json``)
``leasecron check URL``                       connectivity, schema, clock offset, round trip
``leasecron run module:attr``                 run a LeaseCron object until SIGTERM (a warm stop);
                                              a second signal stops at once (a cold stop)
============================================  ===================================================

The commands live in :mod:`~leasecron.cli.commands` (one function per
command, shared with the ``flask leasecron`` group of
:mod:`leasecron.contrib.flask`) and their tables in
:mod:`~leasecron.cli.tables`. Expected errors print one line on stderr: a bad
option, URL or ``module:attr`` (:class:`~leasecron.ConfigError`) exits with 2,
a failed command with 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional

from .. import __version__
from ..errors import ConfigError, LeaseCronError
from . import commands, demo

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
    _json_argument(runs, "runs")

    jobs = _command(
        sub,
        "jobs",
        "list the jobs: last run, stored runs, and (with --app) schedule and next slot",
        "List each job with stored runs: its last run and how many runs the store keeps. The store holds no"
        " schedules: --app module:attr (a LeaseCron, or a Flask app with LeaseCronExtension) adds each"
        " registered job's schedule and next slot." + _READS_ONLY,
    )
    _url_argument(jobs, "store URL (default: the store of --app's LeaseCron)")
    jobs.add_argument("--app", metavar="module:attr", help="the LeaseCron (or Flask app) that registers the jobs")
    _json_argument(jobs, "jobs")

    check = _command(
        sub,
        "check",
        "check a store: connectivity, schema, clock offset, round-trip time",
        "Open the store, create its schema if it is missing (as an instance would), and measure its clock"
        " offset and round trip.",
    )
    _url_argument(check)

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
    return parser


#: Said by every command that only reads the store.
_READS_ONLY = " Reads the store and creates nothing: a store that does not exist is an error naming what is missing."


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


def _json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print a JSON list of {what}")


def main(argv: Optional[List[str]] = None) -> int:
    """Run the ``leasecron`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    handlers = {
        "demo": demo.cmd_demo,
        "runs": commands.cmd_runs,
        "jobs": commands.cmd_jobs,
        "check": commands.cmd_check,
        "run": commands.cmd_run,
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
