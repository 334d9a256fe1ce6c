"""The limits of what every store can keep: names, text and whole numbers.

The job model checks its names and options against them when a job is
registered, and the stores check every argument against them before a
backend sees it: one set of limits, so a job that registers can always be
stored.
"""

from __future__ import annotations

from .errors import ConfigError, shown

__all__ = ["MAX_INT", "MAX_NAME_BYTES", "OVERLAP_MODES", "check_int", "check_job_name", "check_text"]

#: The largest time or count a store accepts (2**50 ms is some 35 000 years):
#: every backend can add two of them exactly, Lua's doubles included.
MAX_INT = 2**50

#: The longest job name, in bytes of UTF-8: every store can key and index it
#: (PostgreSQL's btree index rows hold at most about 2.7 kB).
MAX_NAME_BYTES = 1024

#: The values of a claim's ``overlap``.
OVERLAP_MODES = ("skip", "allow")


def check_text(what: str, value: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``value`` is a string every store can
    keep: no NUL character, and no lone surrogate (it could not be encoded as UTF-8)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, not {shown(value)}")
    if "\x00" in value:
        raise ConfigError(f"{what} must not contain a NUL character: {shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} must be valid Unicode text, but has a lone surrogate at index {exc.start}: {shown(value)}"
        ) from None


def check_job_name(job: object) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``job`` is a job name every store
    accepts: a non-empty string without NUL or lone surrogates, at most
    :data:`MAX_NAME_BYTES` bytes in UTF-8."""
    if not isinstance(job, str) or job == "":
        raise ConfigError(f"job name must be a non-empty string, not {shown(job)}")
    check_text("job name", job)
    size = len(job.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise ConfigError(f"job name must be at most {MAX_NAME_BYTES} bytes in UTF-8, not {size}: {shown(job)}")


def check_int(name: str, value: object, minimum: int) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``value`` is an integer from ``minimum`` to 2**50."""
    if not (isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_INT):
        raise ConfigError(f"{name} must be an integer from {minimum} to 2**50, not {value!r}")
