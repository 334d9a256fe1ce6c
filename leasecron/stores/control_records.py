"""How a store's pause of a job and its requests for manual runs are read back: checked field by
field, as :func:`~leasecron.stores.records.read_record` reads a run, so that what was tampered
with is a :class:`~leasecron.StoreError` naming its job."""

from __future__ import annotations

from typing import Any, Mapping

from ..controls import JobState, ManualRequest
from ..errors import StoreError, shown
from ..states import RequestState
from .records import stored_int, stored_text

__all__ = ["read_pause", "read_request"]

_REQUEST_STATES = RequestState.values()


def read_request(job: str, fields: Mapping[str, Any]) -> ManualRequest:
    """A stored request for a manual run of ``job`` (fields ``slot_ms``, ``requested_by``,
    ``expires_ms`` and ``state``, as stored), checked field by field like :func:`read_record`."""
    slot_ms = fields.get("slot_ms")
    unreadable = f"the stored request of job {job!r} at slot {slot_ms} is unreadable"
    try:
        made = ManualRequest(
            job=job,
            slot_ms=stored_int(fields["slot_ms"], "slot_ms", 0),
            requested_by=stored_text(fields["requested_by"], "requested_by"),
            expires_ms=stored_int(fields["expires_ms"], "expires_ms"),
            state=stored_text(fields["state"], "state"),
        )
        if made.state not in _REQUEST_STATES:
            raise ValueError(f"state is {shown(made.state)}, not one of {', '.join(_REQUEST_STATES)}")
    except KeyError as exc:
        raise StoreError(f"{unreadable}: {exc} is missing") from exc
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{unreadable}: {exc}") from exc
    return made


def read_pause(job: str, fields: Mapping[str, Any]) -> JobState:
    """A stored pause of ``job`` (fields ``paused_by``, ``paused_ms`` and ``note``), checked field by
    field like :func:`read_record`: the job's state, paused, without its requests."""
    try:
        note = fields.get("note")
        return JobState(
            job,
            paused=True,
            paused_by=stored_text(fields["paused_by"], "paused_by"),
            paused_ms=stored_int(fields["paused_ms"], "paused_ms"),
            note=None if note is None else stored_text(note, "note"),
        )
    except KeyError as exc:
        raise StoreError(f"the stored pause of job {job!r} is unreadable: {exc} is missing") from exc
    except (TypeError, ValueError) as exc:
        raise StoreError(f"the stored pause of job {job!r} is unreadable: {exc}") from exc
