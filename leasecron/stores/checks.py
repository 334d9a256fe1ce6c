"""The checks of the arguments of the store operations, made once by :class:`~leasecron.Store`'s
public methods before a backend sees them.

Each check raises :class:`~leasecron.ConfigError` naming the first bad
argument, and builds its message only then: a claim's checks run on every
claim, and cost no more than a few comparisons.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Callable, List, Optional, Type, TypeVar

from ..errors import ConfigError, shown
from ..limits import OVERLAP_MODES, check_int, check_job_name, check_text
from ..states import Reason, Status
from .claim_request import ClaimRequest
from .finish_request import Finish

__all__ = [
    "FINISH_STATUSES",
    "MAX_NOTE_CHARS",
    "MAX_RECENT_JOBS",
    "check_actor",
    "check_batch",
    "check_claim",
    "check_finish",
    "check_finish_of",
    "check_heartbeat",
    "check_note",
    "check_job_names",
    "check_recent_runs",
    "check_return",
    "check_run_key",
    "check_token",
]

#: The most job names one ``recent_runs`` call takes: a call is one statement (one pipeline), and a
#: page of the dashboard asks for 50.
MAX_RECENT_JOBS = 1_000
#: The statuses a finish records, and the reasons a claim may give.
FINISH_STATUSES = (Status.SUCCESS.value, Status.FAILED.value)
_REASONS = Reason.values()


def check_run_key(job: object, slot_ms: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``job`` and ``slot_ms`` name a run."""
    check_job_name(job)
    check_int("slot_ms", slot_ms, 0)


def check_token(job: object, slot_ms: object, token: object) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad job, slot or token."""
    check_run_key(job, slot_ms)
    check_text("token", token)


def check_heartbeat(job: object, slot_ms: object, token: object, lease_ms: object) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a heartbeat."""
    check_token(job, slot_ms, token)
    check_int("lease_ms", lease_ms, 1)


def check_finish(job: object, slot_ms: object, token: object, status: object, error: object) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a finish."""
    check_token(job, slot_ms, token)
    _check_result(status, error)


def check_return(
    job: object, slot_ms: object, attempt: object, runner: object, returned_ms: object, status: object, error: object
) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a
    :meth:`~leasecron.Store.record_return` (rule 26)."""
    check_run_key(job, slot_ms)
    check_int("attempt", attempt, 1)
    if not isinstance(runner, str) or runner == "":
        raise ConfigError(f"runner must be a non-empty string, not {shown(runner)}")
    check_text("runner", runner)
    check_int("returned_ms", returned_ms, 0)
    _check_result(status, error)


def _check_result(status: object, error: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``status`` is a handler's result and ``error`` its text."""
    if status not in FINISH_STATUSES:
        raise ConfigError(f"status must be 'success' or 'failed', not {status!r}")
    if error is not None:
        if not isinstance(error, str):
            raise ConfigError(f"error must be a string or None, not {error!r}")
        check_text("error", error.replace("\x00", ""))  # a NUL is kept (or replaced) by the store


def check_finish_of(finish: Finish) -> None:
    """:func:`check_finish` of the fields of ``finish``."""
    check_finish(finish.job, finish.slot_ms, finish.token, finish.status, finish.error)


_Item = TypeVar("_Item", ClaimRequest, Finish)


def check_batch(items: Iterable[object], name: str, kind: Type[_Item], check: Callable[[_Item], None]) -> List[_Item]:
    """``items`` as a list, once each is found to be a ``kind`` that passes ``check``; else
    :class:`~leasecron.ConfigError` naming the first bad one by its index in ``name`` (the
    argument of a batch operation: ``claim_many``'s requests, ``finish_many``'s finishes)."""
    checked = list(items)
    for index, item in enumerate(checked):
        if not isinstance(item, kind):
            raise ConfigError(f"{name}[{index}] must be a {kind.__name__}, not {shown(item)}")
        try:
            check(item)
        except ConfigError as exc:
            raise ConfigError(f"{name}[{index}] (job {shown(item.job)}): {exc}") from None
    return checked  # type: ignore[return-value]  # each item is a kind


def check_claim(request: ClaimRequest) -> None:
    """Raise :class:`~leasecron.ConfigError` naming the first bad argument of a claim."""
    check_run_key(request.job, request.slot_ms)
    runner: object = request.runner
    if not isinstance(runner, str) or runner == "":
        raise ConfigError(f"runner must be a non-empty string, not {runner!r}")
    check_text("runner", runner)
    if request.reason not in _REASONS:
        raise ConfigError(f"reason must be one of {', '.join(_REASONS)}, not {request.reason!r}")
    check_int("lease_ms", request.lease_ms, 1)
    check_int("max_attempts", request.max_attempts, 1)
    check_int("max_late_ms", request.max_late_ms, 0)
    if request.overlap not in OVERLAP_MODES:
        raise ConfigError(f"overlap must be 'skip' or 'allow', not {request.overlap!r}")
    check_int("history_size", request.history_size, 0)
    check_int("version", request.version, 0)
    if type(request.brief) is not bool:
        raise ConfigError(f"brief must be True or False, not {shown(request.brief)}")
    token: Optional[object] = request.token
    if token is not None:
        if not isinstance(token, str) or token == "":
            raise ConfigError(f"token must be a non-empty string or None, not {token!r}")
        check_text("token", token)


#: The longest note of a pause, in characters.
MAX_NOTE_CHARS = 1_000


def check_actor(by: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``by`` (who pauses, resumes or asks for a
    run) is a non-empty string every store can keep, of at most 200 characters."""
    if not isinstance(by, str) or by == "" or len(by) > 200:
        raise ConfigError(f"by (who acts) must be a non-empty string of at most 200 characters, not {shown(by)}")
    check_text("by", by)


def check_note(note: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``note`` is ``None`` or text every store can
    keep, of at most :data:`MAX_NOTE_CHARS` characters."""
    if note is None:
        return
    check_text("note", note)
    assert isinstance(note, str)
    if len(note) > MAX_NOTE_CHARS:
        raise ConfigError(f"note must be at most {MAX_NOTE_CHARS} characters, not {len(note)}")


def check_job_names(jobs: object, most: Optional[int] = None, operation: str = "") -> List[str]:
    """The distinct names of ``jobs``, in the order they first appear, once ``jobs`` is found to
    be a sequence of job names (at most ``most`` of them, which ``operation`` takes per call);
    else :class:`~leasecron.ConfigError` naming what is wrong (a bad name by its index)."""
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence):
        raise ConfigError(f"jobs must be a sequence (a list or tuple) of job names, not {shown(jobs)}")
    if most is not None and len(jobs) > most:
        raise ConfigError(f"jobs holds {len(jobs)} names; {operation} takes at most {most} per call")
    for index, job in enumerate(jobs):
        try:
            check_job_name(job)
        except ConfigError as exc:
            raise ConfigError(f"jobs[{index}]: {exc}") from None
    return list(dict.fromkeys(jobs))


def check_recent_runs(jobs: object, limit: object) -> List[str]:
    """The distinct names of ``jobs`` (:func:`check_job_names`: at most :data:`MAX_RECENT_JOBS`),
    once ``limit`` is found an integer of at least 1 too; else :class:`~leasecron.ConfigError`
    naming the first bad argument."""
    names = check_job_names(jobs, MAX_RECENT_JOBS, "recent_runs")
    check_int("limit", limit, 1)
    return names
