"""The operators' controls: ``pause``, ``resume`` and ``trigger`` a job on every instance at once.

As in :mod:`~leasecron.cli.commands`, one implementation serves both command lines:
``pause_output`` and ``resume_output`` return the lines to print; :func:`trigger` makes the
request and, asked to, waits for its run (:func:`wait_for_run`), and returns the exit code. The
``leasecron`` commands write but never create a store (a typo must not make an empty store,
where a pause is lost without a word), and act on any job name, warning about one without stored
runs (:func:`unknown_job_warning`); ``flask leasecron`` refuses a job the app does not register
(:func:`check_registered`).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import socket
import sys
import time
from contextlib import contextmanager
from typing import Callable, Collection, Iterator, List, Optional

from ..announcements import registering
from ..controls import JobState, ManualRequest
from ..errors import ConfigError, StoreError
from ..formatting import attempt_chain, format_duration, utc_time
from ..runs import Run
from ..states import RequestState, ScheduleSource, Status
from ..stores import Store, open_store
from .commands import CommandError, reading

__all__ = [
    "DEFAULT_WAIT_S",
    "POLL_S",
    "Waited",
    "actor",
    "cmd_pause",
    "cmd_resume",
    "cmd_trigger",
    "check_registered",
    "creating_nothing",
    "existing_store",
    "pause_output",
    "print_lines",
    "resume_output",
    "trigger",
    "unknown_job_warning",
    "wait_for_run",
    "wait_seconds",
    "warn",
]

#: How often ``trigger --wait`` reads the store, in seconds.
POLL_S = 0.25

Emit = Callable[[str], None]


def actor(by: Optional[str]) -> str:
    """Who acts: ``--by`` as given (the store checks it), or else ``user@host`` of this process."""
    if by is not None:
        return by
    try:
        user = getpass.getuser()
    except (OSError, KeyError, ImportError):  # no user name in the environment nor in the password database
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def unknown_job_warning(store: Store, job: str) -> Optional[str]:
    """A warning when ``job`` may be a mistyped name, as it has no stored runs; None when it has."""
    with reading(store):
        if store.runs(job, limit=1):
            return None
    return (
        f"job {job!r} has no stored runs in {store!r}; is the name right? (the store holds no"
        " list of jobs: a job that never ran is acted on all the same)"
    )


def unregistered_job_warning(store: Store, job: str) -> Optional[str]:
    """A warning when no live instance registers ``job`` (in its code, or, for a stored job, its
    task): its request waits for one to start. None when one does."""
    with reading(store):
        record = store.stored_schedule(job)
        live = store.instances()
    task = record.task if record is not None and record.source == ScheduleSource.STORED else None
    if registering(live, job, task):
        return None
    what = f"job {job!r}" + (f" or its task {task!r}" if task is not None else "")
    return (
        f"no live instance registers {what} ({len(live)} live in {store!r}, see `leasecron instances`):"
        " the request waits for an instance that does to start, until it expires"
    )


def check_registered(job: str, registered: Collection[str], command: str) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``job`` is one of the app's ``registered`` jobs
    (``flask leasecron``, like :meth:`LeaseCron.pause <leasecron.LeaseCron.pause>`, acts on those only)."""
    if job not in registered:
        known = ", ".join(repr(name) for name in sorted(registered)) or "none"
        raise ConfigError(
            f"job {job!r} is not a job of the app (its jobs: {known}); for a job of another app, use"
            f" `leasecron {command} URL JOB`"
        )


@contextmanager
def existing_store(url: str, command: str) -> Iterator[Store]:
    """The store at ``url`` opened to write without creating anything; its missing parts said plainly."""
    store = open_store(url, create=False)
    try:
        with creating_nothing(command):
            yield store
    finally:
        store.close()


@contextmanager
def creating_nothing(command: str) -> Iterator[None]:
    """Turn the error of a store opened with ``create=False`` that misses a part (file, schema, table)
    into a :class:`CommandError` that names the part and says ``leasecron COMMAND`` creates none."""
    try:
        yield
    except StoreError as exc:
        if "create=False" not in str(exc):
            raise
        what = str(exc).replace(" (a store with create=False creates nothing)", "")
        raise CommandError(
            f"{what}: `leasecron {command}` creates no store (check the URL, or start an instance or run"
            " `leasecron check URL`, which create it)"
        ) from exc


def print_lines(lines: List[str]) -> None:
    """Print ``lines`` on stdout, each flushed."""
    for line in lines:
        print(line, flush=True)


def warn(command: str, text: Optional[str]) -> None:
    """Print ``text``, if any, as a warning of ``leasecron COMMAND`` on stderr."""
    if text is not None:
        print(f"leasecron {command}: warning: {text}", file=sys.stderr, flush=True)


# -- pause and resume ----------------------------------------------------------------------


def cmd_pause(args: argparse.Namespace) -> int:
    """``leasecron pause URL JOB [--note TEXT] [--by WHO] [--json]``."""
    with existing_store(args.url, "pause") as store:
        print_lines(pause_output(store, args.job, actor(args.by), args.note, args.json))
        warn("pause", unknown_job_warning(store, args.job))
    return 0


def pause_output(store: Store, job: str, by: str, note: Optional[str], as_json: bool) -> List[str]:
    """Pause ``job`` (rule 18); the lines ``pause`` prints (``as_json``: the job's state)."""
    state = store.pause(job, by=by, note=note)
    if as_json:
        return [json.dumps(state.to_dict(), indent=2)]
    return [
        f"Paused job {job!r}: {_pause_text(state)}.",
        "Every instance skips its new slots until it is resumed; a run that is running goes on,"
        " and a triggered run still runs.",
    ]


def _pause_text(state: JobState) -> str:
    when = f"{utc_time(state.paused_ms, True)} UTC" if state.paused_ms is not None else "(unknown)"
    return f"by {state.paused_by}, {when}" + (f", note: {state.note}" if state.note else "")


def cmd_resume(args: argparse.Namespace) -> int:
    """``leasecron resume URL JOB [--by WHO] [--json]``."""
    with existing_store(args.url, "resume") as store:
        print_lines(resume_output(store, args.job, actor(args.by), args.json))
        warn("resume", unknown_job_warning(store, args.job))
    return 0


def resume_output(store: Store, job: str, by: str, as_json: bool) -> List[str]:
    """Resume ``job`` (rule 18); the lines ``resume`` prints (``as_json``: the job's state, as
    ``pause`` prints it). The text says whether the job was paused, read just before."""
    before = store.job_state(job)
    state = store.resume(job, by=by)
    if as_json:
        return [json.dumps(state.to_dict(), indent=2)]
    if not before.paused:
        return [f"Job {job!r} was not paused: nothing changed."]
    return [
        f"Resumed job {job!r} (it was paused {_pause_text(before)}).",
        "Its next slot runs as usual; the slots skipped while it was paused are not caught up.",
    ]


# -- trigger -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Waited:
    """How ``trigger --wait`` ended: ``result`` is the run's status (``success``, ``failed``,
    ``interrupted``), the request's end without a run (``expired``, ``skipped``), ``gone`` (the
    store keeps neither the request nor a run at its slot) or ``timeout`` (the wait gave up)."""

    result: str
    request: ManualRequest
    run: Optional[Run]


def cmd_trigger(args: argparse.Namespace) -> int:
    """``leasecron trigger URL JOB [--max-late-ms N] [--wait [--timeout S]] [--by WHO] [--json]``."""
    wait_s = wait_seconds(args.wait, args.timeout)
    with existing_store(args.url, "trigger") as store:
        return trigger(
            store,
            args.job,
            by=actor(args.by),
            max_late_ms=args.max_late_ms,
            wait_s=wait_s,
            as_json=args.json,
            emit=lambda line: print(line, flush=True),
            warn=lambda text: warn("trigger", text),
        )


#: How long ``trigger --wait`` waits by default, in seconds.
DEFAULT_WAIT_S = 3600.0


def wait_seconds(wait: bool, timeout: Optional[float]) -> Optional[float]:
    """How long ``trigger`` waits: None without ``--wait``; ``--timeout`` or :data:`DEFAULT_WAIT_S`."""
    if not wait:
        if timeout is not None:
            raise ConfigError("--timeout is the longest wait of --wait: give --wait too")
        return None
    if timeout is None:
        return DEFAULT_WAIT_S
    if not timeout > 0:
        raise ConfigError(f"--timeout must be a number of seconds above 0, not {timeout}")
    return timeout


def trigger(
    store: Store,
    job: str,
    *,
    by: str,
    max_late_ms: int,
    wait_s: Optional[float],
    as_json: bool,
    emit: Emit,
    warn: Optional[Emit] = None,
) -> int:
    """Request a manual run of ``job`` (rule 19) and print its slot; with ``wait_s``, wait up to
    that many seconds for the run to end. Returns the exit code: 0, or with ``wait_s`` 0 only if
    the run succeeded. Text goes to ``emit`` as it happens (``as_json``: one JSON object at the
    end: ``request``, and with ``wait_s`` also ``result`` and ``run``); ``warn``, if given, gets
    the warning of a job name that may be mistyped (see :func:`unknown_job_warning`)."""
    request = store.request_run(job, by=by, max_late_ms=max_late_ms)
    if not as_json:
        emit(
            f"Requested a manual run of {job!r}: slot {request.slot_ms} ({utc_time(request.slot_ms, True)} UTC),"
            f" by {request.requested_by}."
        )
        emit(
            "An instance that has the job registered claims it within its poll_ms; unclaimed, the request"
            f" expires at {utc_time(request.expires_ms, True)} UTC"
            f" (in {format_duration(request.expires_ms - request.slot_ms)})."
        )
    if warn is not None:
        for warning in (unregistered_job_warning(store, job), unknown_job_warning(store, job)):
            if warning is not None:
                warn(warning)
    if wait_s is None:
        if as_json:
            emit(json.dumps({"request": request.to_dict()}, indent=2))
        return 0
    waited = wait_for_run(store, request, wait_s, (lambda line: None) if as_json else emit)
    if as_json:
        data = {"request": waited.request.to_dict(), "result": waited.result}
        emit(json.dumps({**data, "run": waited.run.to_dict() if waited.run else None}, indent=2))
    else:
        for line in _result_lines(waited, wait_s):
            emit(line)
    return 0 if waited.result == Status.SUCCESS else 1


def wait_for_run(store: Store, request: ManualRequest, wait_s: float, emit: Emit, poll_s: float = POLL_S) -> Waited:
    """Read the run at the request's slot (and, while there is none, the request) every ``poll_s``
    seconds until the run ends, the request ends without a run, or ``wait_s`` seconds passed;
    ``emit`` gets a line for each attempt that starts."""
    deadline = time.monotonic() + wait_s
    started = 0  # the attempts reported
    while True:
        run = store.get_run(request.job, request.slot_ms)
        if run is not None:
            for number in range(started + 1, run.attempt + 1):
                emit(_attempt_started(run, number, request))
            started = max(started, run.attempt)
            if run.finished:
                return Waited(run.status, _request_now(store, request) or request, run)
        else:
            current = _request_now(store, request)
            if current is None:
                return Waited("gone", request, None)
            if current.state in (RequestState.EXPIRED, RequestState.SKIPPED):
                return Waited(current.state, current, None)
        if time.monotonic() >= deadline:
            return Waited("timeout", _request_now(store, request) or request, run)
        time.sleep(poll_s)


def _request_now(store: Store, request: ManualRequest) -> Optional[ManualRequest]:
    """The request as the store holds it now (its state); None if the store keeps it no more."""
    return next((r for r in store.job_state(request.job).requests if r.slot_ms == request.slot_ms), None)


def _attempt_started(run: Run, number: int, request: ManualRequest) -> str:
    attempt = next((a for a in run.attempts if a.number == number), None)
    if attempt is None:  # no longer kept, or a store that records no attempts
        return f"attempt {number} started" + (f" on {run.runner} ({run.reason})" if number == run.attempt else "")
    after = format_duration(attempt.started_ms - request.slot_ms)
    return f"attempt {number} started on {attempt.runner} ({attempt.reason}), {after} after the request"


def _result_lines(waited: Waited, wait_s: float) -> List[str]:
    request, run = waited.request, waited.run
    what = f"the manual run of {request.job!r} at slot {request.slot_ms}"
    if waited.result == "expired":
        return [
            f"expired: no instance claimed the request by {utc_time(request.expires_ms, True)} UTC; is an"
            f" instance that registers {request.job!r} started?"
        ]
    if waited.result == "skipped":
        return [f"skipped: another run of {request.job!r} was running (overlap='skip'): {what} did not start"]
    if waited.result == "gone":
        return [f"gone: the store keeps neither the request nor a run at slot {request.slot_ms}"]
    if waited.result == "timeout":
        where = "the request is still pending" if run is None else f"attempt {run.attempt} runs on {run.runner}"
        return [
            f"timeout: gave up waiting after {format_duration(round(wait_s * 1000))}: {where}; it goes on"
            f" (`leasecron show URL {request.job} {request.slot_ms}` shows it)"
        ]
    assert run is not None and run.finished_ms is not None
    took = format_duration(run.finished_ms - request.slot_ms)
    lines = [f"{waited.result}: {what} ended {took} after the request; attempts: {attempt_chain(run)}"]
    if run.error:
        lines += [f"error: {line}" if i == 0 else f"       {line}" for i, line in enumerate(run.error.splitlines())]
    return lines
