"""What the Redis store's scripts are sent and what their replies mean, as Python values.

The arguments of a claim (:func:`claim_args`) and of a stored schedule (:func:`schedule_args`),
the members of the index of open requests (:func:`index_member`), and the replies turned into
the public values: runs (checked by :func:`~leasecron.stores.records.read_record`), claims, job
states and requests, and stored schedules, each a :class:`~leasecron.StoreError` naming its job
(and slot) when what was stored was tampered with. :func:`text` decodes a reply of a client that
does not decode them.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..announcements import LiveInstance, read_announcement
from ..controls import JobState, ManualRequest
from ..errors import StoreError, shown
from ..runs import Claim, Run, RunBrief
from ..states import Outcome, RequestState, ScheduleSource
from ..stored import FINISHED_STATUSES, JobOverview, ScheduleChanges, StoredSchedule
from .claim_request import ClaimRequest
from .records import new_token, read_brief, read_record

__all__ = [
    "text",
    "read_run",
    "read_run_brief",
    "read_runs",
    "claim_args",
    "ClaimReply",
    "read_claim",
    "read_state",
    "index_member",
    "read_index",
    "schedule_args",
    "read_schedule",
    "read_changes",
    "read_job_overview",
]


def text(value: Union[str, bytes]) -> str:
    """A reply's text, whether the client decodes replies or not."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _json(raw: Union[str, bytes], unreadable: Callable[[], str]) -> Any:
    try:
        return json.loads(text(raw))
    except ValueError as exc:  # not JSON (or not UTF-8)
        raise StoreError(f"{unreadable()}: not JSON: {exc}") from exc


def read_run(job: str, slot: Union[str, bytes], raw: Optional[Union[str, bytes]]) -> Run:
    """The run stored as JSON ``raw``; StoreError naming the job and slot if it was tampered with."""
    slot_text = text(slot)
    return read_record(job, slot_text, _run_object(job, slot_text, raw)).to_run()


def read_run_brief(job: str, slot: Union[str, bytes], raw: Union[str, bytes]) -> RunBrief:
    """:func:`read_run`, only what a brief answer carries (:func:`~leasecron.stores.records.read_brief`)."""
    slot_text = text(slot)
    return read_brief(job, slot_text, _run_object(job, slot_text, raw))


def _run_object(job: str, slot_text: str, raw: Optional[Union[str, bytes]]) -> Dict[str, Any]:
    """The JSON object of a stored run; StoreError naming the job and slot if it is none."""

    def unreadable() -> str:  # the message is made only for a run that is
        return f"the stored run of job {job!r} at slot {slot_text} is unreadable"

    data = _json(raw, unreadable) if raw is not None else None
    if type(data) is not dict:
        raise StoreError(f"{unreadable()}: {shown(data)} is no JSON object")
    return data


def read_runs(job: str, reply: Sequence[Any]) -> List[Run]:
    """The runs of runs.lua's ``reply`` (slot, run JSON, slot, run JSON, ...)."""
    return [read_run(job, reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]


def claim_args(request: ClaimRequest) -> Tuple[Union[str, int], ...]:
    """claim.lua's ARGV for ``request`` (see the script's header)."""
    args: Tuple[Union[str, int], ...] = (
        request.slot_ms, new_token() if request.token is None else request.token, request.runner, request.reason,
        request.lease_ms, request.max_attempts, request.max_late_ms, request.overlap, request.history_size,
        request.version,
    )  # fmt: skip
    if request.token is not None:  # a new token for a next attempt, which must not get ``token``
        args += (new_token(),)
    return args


class ClaimReply(NamedTuple):
    """What claim.lua answered."""

    claim: Claim
    #: Whether the claim stored the job's first run.
    first: bool
    #: The requester of the request whose index entry must change, or None; and its state now.
    requested_by: Optional[str]
    state: str
    #: Whether the answer rests on what the claim wrote (rule 22).
    wrote: bool


def read_claim(request: ClaimRequest, reply: Sequence[Any]) -> ClaimReply:
    """The answer of claim.lua's ``reply`` to ``request`` (a brief answer: the script still sends
    the stored JSON, cheaper than building a shorter one; only the brief's fields are read)."""
    job = request.job
    raw_outcome, at, raw = reply[:3]
    outcome = text(raw_outcome)
    if raw is None:
        claim = Claim(outcome)
    elif request.answers_brief(outcome):
        claim = Claim(outcome, None, read_run_brief(job, at, raw))
    else:
        claim = Claim(outcome, read_run(job, at, raw))
    if len(reply) == 3:
        return ClaimReply(claim, False, None, "", claim.outcome == Outcome.WON)
    first, requested_by, state, wrote = reply[3:]
    by = None if requested_by is None else text(requested_by)
    return ClaimReply(claim, first == 1, by, text(state or ""), wrote == 1 or claim.outcome == Outcome.WON)


def _int(value: object) -> int:
    """An integer, or its decimal text as Lua wrote it; else ValueError."""
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"{shown(value)} is not an integer")


def _request(job: str, slot: Union[str, bytes], raw: Union[str, bytes], now: int) -> ManualRequest:
    """The request stored at ``slot`` as JSON ``raw``, its state judged at ``now``."""
    unreadable = f"the stored request of job {job!r} at slot {text(slot)} is unreadable"
    data = _json(raw, lambda: unreadable)
    try:
        if not isinstance(data, dict):
            raise TypeError(f"{shown(data)} is no JSON object")
        by, state = data.get("requested_by"), data.get("state")
        if not isinstance(by, str) or state not in RequestState.values():
            raise ValueError(f"requested_by {shown(by)} or state {shown(state)} is not one a request has")
        expires = _int(data.get("expires_ms"))
        request = ManualRequest(job, _int(slot), by, expires, state)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{unreadable}: {exc}") from exc
    if request.pending and now > expires:
        return ManualRequest(job, request.slot_ms, by, expires, RequestState.EXPIRED)
    return request


def read_state(job: str, reply: Sequence[Any]) -> JobState:
    """The state of ``job`` from the reply of a script that ends with ``state_reply`` (common.lua)."""
    now = _int(reply[0])
    by, ms, note = (None if value is None else text(value) for value in reply[1:4])
    try:
        paused_ms = None if ms is None else _int(ms)
    except ValueError as exc:
        raise StoreError(f"the stored pause of job {job!r} is unreadable: paused_ms {exc}") from exc
    requests = sorted(
        (_request(job, reply[i], reply[i + 1], now) for i in range(4, len(reply), 2)), key=lambda r: r.slot_ms
    )
    if by is None:  # not paused (a pause always has its who)
        return JobState(job, requests=tuple(requests))
    return JobState(job, True, by, paused_ms, note, tuple(requests))


def index_member(job: str, slot_ms: int, requested_by: str, *, claimed: bool = False) -> str:
    """A request's member of the index of open requests: JSON text, made only here; a claimed
    request's has a fourth item, ``"claimed"``."""
    fields: List[Any] = [job, slot_ms, requested_by] + ([RequestState.CLAIMED.value] if claimed else [])
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def read_index(reply: Sequence[Any]) -> List[ManualRequest]:
    """The open (pending or claimed) requests in the reply of index.lua's ``read``, oldest slot first."""
    found = []
    for i in range(0, len(reply), 2):
        member = text(reply[i])
        try:
            job, slot_ms, by, *claimed = json.loads(member)
            state = RequestState.CLAIMED if claimed else RequestState.PENDING
            request = ManualRequest(job, slot_ms, by, int(float(text(reply[i + 1]))), state)
            if not (isinstance(job, str) and isinstance(slot_ms, int) and isinstance(by, str)):
                raise TypeError("not [job, slot_ms, requested_by]")
            if claimed not in ([], [RequestState.CLAIMED.value]):
                raise TypeError(f"{claimed!r} after [job, slot_ms, requested_by], not nothing or 'claimed'")
        except (TypeError, ValueError) as exc:
            raise StoreError(f"the index of pending requests holds {shown(member)}, no request: {exc}") from exc
        found.append(request)
    return sorted(found, key=lambda r: (r.slot_ms, r.job))


def schedule_args(
    by: str,
    source: str,
    schedule: Optional[str],
    tz: Optional[str],
    task: Optional[str],
    kwargs: Dict[str, Any],
    options: Dict[str, Any],
) -> Tuple[str, ...]:
    """schedule.lua's ARGV for a record (see the script's header): its fields as field, value,
    ..., those it has not left out; ``kwargs`` and ``options`` as JSON text, which Lua keeps as
    it is (its integers stay exact)."""
    fields: List[Tuple[str, Optional[str]]] = [("source", source), ("by", by), ("schedule", schedule), ("tz", tz),
                                               ("task", task)]  # fmt: skip
    if task is not None:  # a stored job's; the others' are empty
        fields += [("kwargs", _json_text(kwargs)), ("options", _json_text(options))]
    return tuple(part for field, value in fields if value is not None for part in (field, value))


def _json_text(value: Dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def read_schedule(job: str, reply: Union[Sequence[Any], Dict[Any, Any]]) -> StoredSchedule:
    """The stored schedule of ``job`` from its fields: a flat reply (field, value, ...) or a dict
    (``HGETALL``); StoreError naming the job if it was tampered with."""
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2])
    fields = {text(field): text(value) for field, value in pairs}
    try:
        source, by = fields.get("source"), fields.get("by")
        if source not in ScheduleSource.values() or not isinstance(by, str):
            raise ValueError(f"source {shown(source)} or by {shown(by)} is not one a schedule has")
        kwargs, options = (json.loads(fields.get(name, "{}")) for name in ("kwargs", "options"))
        if not isinstance(kwargs, dict) or not isinstance(options, dict):
            raise ValueError(f"kwargs {shown(kwargs)} or options {shown(options)} is no JSON object")
        return StoredSchedule(
            job, _int(fields.get("version")), source, fields.get("schedule"), fields.get("tz"), fields.get("task"),
            kwargs, options, by, _int(fields.get("ms")),
        )  # fmt: skip
    except (TypeError, ValueError) as exc:  # a JSON error is a ValueError
        raise StoreError(f"the stored schedule of job {job!r} is unreadable: {exc}") from exc


def read_changes(since: int, reply: Sequence[Any]) -> ScheduleChanges:
    """The answer of changes.lua's ``read`` after cursor ``since``: {cursor, job, record JSON, ...}."""
    changes = tuple(_change(text(job), raw) for job, raw in zip(reply[1::2], reply[2::2]))
    return ScheduleChanges(max(since, _int(reply[0])), changes)


def _change(job: str, raw: Optional[Union[str, bytes]]) -> StoredSchedule:
    """The changelog's record of ``job``, JSON ``raw``."""
    unreadable = f"the changelog's record of {job!r} is unreadable"
    record = None if raw is None else _json(raw, lambda: unreadable)
    if not isinstance(record, dict):
        raise StoreError(f"{unreadable}: {shown(record)} is no JSON object")
    return read_schedule(job, record)


def read_instances(reply: Sequence[Any]) -> List[LiveInstance]:
    """instances.lua's ``read``: ``{runner, "<started_ms> <body>", seen_ms, ...}`` as live
    instances, oldest start first; :class:`~leasecron.StoreError` naming a runner whose kept
    value is unreadable."""
    found = []
    for i in range(0, len(reply), 3):
        runner, kept = text(reply[i]), text(reply[i + 1])
        started, _, body = kept.partition(" ")
        if not started.isdigit():
            raise StoreError(f"the announcement of instance {runner!r} is unreadable: {shown(kept[:80])}")
        found.append(read_announcement(runner, body, int(started), _int(reply[i + 2])))
    return sorted(found, key=lambda instance: (instance.started_ms, instance.runner))


def read_job_overview(job: str, reply: Sequence[Any]) -> Tuple[bool, JobOverview]:
    """overview.lua's reply for ``job``: whether it is paused, and its :class:`~leasecron.stored.JobOverview`."""
    paused, slot, raw, *ends = reply
    last = None if slot is None else read_run(job, slot, raw)
    try:
        finished = {status: _int(ms) for status, ms in zip(FINISHED_STATUSES, ends) if ms is not None}
    except ValueError as exc:
        raise StoreError(f"a stored run of job {job!r} is unreadable: its finished_ms {exc}") from exc
    return paused == 1, JobOverview(job, last, finished)
