"""The arguments of one finish, as one value: what :meth:`~leasecron.Store.finish_many` takes."""

from __future__ import annotations

from typing import NamedTuple, Optional

__all__ = ["Finish"]


class Finish(NamedTuple):
    """The arguments of one :meth:`~leasecron.Store.finish`, as one value:
    :meth:`~leasecron.Store.finish_many` takes one per finish. Each field is the argument of
    :meth:`~leasecron.Store.finish` of the same name (``status`` is ``"success"`` or ``"failed"``)."""

    #: The job whose run ends.
    job: str
    #: The run's slot.
    slot_ms: int
    #: The current attempt's token (rule 14: only it finishes the run).
    token: str
    #: ``"success"`` or ``"failed"``.
    status: str
    #: The error of a failed run, if any.
    error: Optional[str] = None
