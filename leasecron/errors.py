"""The exceptions of leasecron: one root, and a class for each kind of failure.

Each class docstring is the message a user reads when it is raised bare.
"""

from __future__ import annotations

__all__ = ["LeaseCronError", "ConfigError", "StoreError", "StoreUnavailable", "Aborted"]


class LeaseCronError(Exception):
    """Something went wrong in leasecron."""


class ConfigError(LeaseCronError, ValueError):
    """A job, an option or a store URL is not valid."""


class StoreError(LeaseCronError):
    """The store failed to carry out an operation.

    Raised ``from`` the driver's own error, which stays in ``__cause__``.
    """


class StoreUnavailable(StoreError):
    """The store could not be reached, or was too busy to answer; the call may be retried.

    leasecron retries these itself, but never past the time in which the
    answer still matters (a heartbeat never past its lease).
    """


class Aborted(LeaseCronError):
    """The run was aborted: its lease was lost, or the instance is stopping.

    Raise it from a handler (or call ``ctx.signal.raise_if_aborted()``) when
    ``ctx.signal`` is aborted, so that a stopping instance hands the run over.
    """


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
