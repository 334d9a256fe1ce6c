"""``python manage.py leasecron VERB``: the ``leasecron`` command's verbs on the project's store and jobs.

The verbs and their options are the ``leasecron`` command's own: each verb's parser is built from
the one :func:`leasecron.cli.build_parser` makes, less what names the store or the app (``URL``,
``--app``, ``module:attr``), which the project gives (:data:`TAKEN_FROM_THE_PROJECT`). What each
verb does is in :mod:`leasecron.contrib.django.verbs`. Exit codes as the ``leasecron`` command's:
2 for a bad option or setting, 1 for a failed command (and ``trigger --wait`` for a run that did
not succeed).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, Tuple

from django.core.management.base import BaseCommand, CommandError, CommandParser  # type: ignore[import-untyped]

from leasecron.cli import verbs
from leasecron.cli.commands import CommandError as FailedCommand
from leasecron.contrib.django.project import get_cron
from leasecron.contrib.django.verbs import VERBS
from leasecron.errors import ConfigError, LeaseCronError

__all__ = ["Command", "TAKEN_FROM_THE_PROJECT", "cli_verbs"]

#: The ``leasecron`` command's arguments that the project gives here: the store and the cron.
TAKEN_FROM_THE_PROJECT = ("help", "url", "app", "target")
#: Where the verbs' summaries (in ``manage.py leasecron --help``) say differently here.
SUMMARIES = {
    "jobs": "list the project's jobs and the store's: schedule, last run, pause, pending manual runs, next slot",
    "check": "check the project's store: connectivity, schema, clock offset, round-trip time",
    "run": "run the project's cron until SIGTERM",
    "dashboard": "serve the dashboard of the project's store and jobs in a browser: runs, pause, resume, trigger",
}
#: Where the verbs' descriptions (in ``manage.py leasecron VERB --help``) say differently here.
DESCRIPTIONS = {
    "jobs": "List the project's jobs with their schedules, and the store's: last run, stored runs, pause,"
    " pending manual runs, stored schedules, next slot. Reads the store and creates nothing.",
    "run": "Run the project's cron in the foreground until SIGTERM or SIGINT (graceful stop: live runs are"
    " handed over); a second signal stops at once.",
    "dashboard": "Serve the dashboard of the project's store and jobs (leasecron.contrib.dashboard; needs the"
    " dashboard extra) with gunicorn (1 worker, threads) when it is installed, else Werkzeug's threaded"
    " server, until SIGTERM or Ctrl-C. It listens on 127.0.0.1 by default; any address that is not loopback"
    " requires a password (HTTP basic authentication). Creates no store.",
}


def cli_verbs() -> Dict[str, Tuple[str, argparse.ArgumentParser]]:
    """The ``leasecron`` command's verbs: each one's summary (``leasecron --help``'s) and parser
    (:func:`leasecron.cli.verbs`)."""
    return verbs()


def _here(text: str) -> str:
    """A ``leasecron`` help text as it reads here: ``manage.py leasecron VERB``, no URL."""
    return text.replace(" URL JOB", " JOB").replace(" URL`", "`").replace("`leasecron ", "`manage.py leasecron ")


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    """``manage.py leasecron VERB [options]``."""

    help = (
        "leasecron: the project's cron jobs, their stored runs, and the store (settings.LEASECRON); the"
        " `leasecron` command's verbs and options, with no URL nor --app."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """One subparser a verb, with the ``leasecron`` command's options but those the project gives."""
        verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
        cli = cli_verbs()
        for name in VERBS:
            summary, original = cli[name]
            summary = SUMMARIES.get(name, summary)
            description = DESCRIPTIONS.get(name) or _here(original.description or summary)
            sub = verbs.add_parser(name, help=summary, description=description)
            for action in original._actions:
                if action.dest in TAKEN_FROM_THE_PROJECT or (name, action.dest) == ("trigger", "max_late_ms"):
                    continue
                action.help = _here(action.help) if isinstance(action.help, str) else action.help
                sub._add_action(action)  # as argparse's own parents= does: the action object itself
            if name == "trigger":
                sub.add_argument(
                    "--max-late-ms", type=int, metavar="N",
                    help="how long an instance may take to claim it, plus 10 s (default: the job's max_late_ms)",
                )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the verb on the project's cron; a failure as one line (``CommandError``) with its exit code."""
        verb = options.pop("verb")

        def emit(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        def warn(text: str) -> None:
            self.stderr.write(f"leasecron {verb}: warning: {text}")

        try:
            code = VERBS[verb](get_cron(), options, emit, warn)
        except ConfigError as exc:
            raise CommandError(f"leasecron {verb}: {_one_line(exc)}", returncode=2) from exc
        except (LeaseCronError, FailedCommand) as exc:
            raise CommandError(f"leasecron {verb}: {_one_line(exc)}", returncode=1) from exc
        if code:
            sys.exit(code)


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
