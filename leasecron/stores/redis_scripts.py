"""The Redis store's keys, its Lua scripts, and what their replies mean.

:class:`~leasecron.stores.redis.RedisStore` explains the keys and why they
are laid out so. This module names them (:func:`job_keys`,
:func:`control_keys`, :func:`schedule_key`, :func:`changelog_keys`), loads the
scripts of ``stores/lua/`` with the numbers of the protocol rendered in
(:func:`load_scripts`), runs several in one round trip (:func:`run_scripts`),
and turns the scripts' replies into the public values: runs (checked by
:func:`~leasecron.stores.records.read_record`), job states and requests, and
stored schedules, each a :class:`~leasecron.StoreError` naming its job (and
slot) when what was stored was tampered with.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union
from urllib.parse import quote

from ..controls import JobState, ManualRequest
from ..errors import StoreError, shown
from ..runs import MAX_ATTEMPTS_KEPT, Claim, Run
from ..states import Outcome, RequestState, ScheduleSource
from ..stored import ScheduleChanges, StoredSchedule
from . import require
from .base import REQUESTS_KEPT
from .claim_request import ClaimRequest
from .records import new_token, read_record
from .templates import read_text, render

__all__ = [
    "Script",
    "load_scripts",
    "job_keys",
    "control_keys",
    "schedule_key",
    "changelog_keys",
    "run_scripts",
    "text",
    "read_run",
    "read_runs",
    "claim_args",
    "read_claim",
    "read_state",
    "index_member",
    "read_index",
    "schedule_args",
    "read_schedule",
    "read_changes",
]

_SAFE = "._-"  # with letters and digits: the bytes a job name keeps in its key

#: The scripts of ``stores/lua/``, each with how many of a job's keys it takes (0: none, see index.lua
#: and changes.lua).
SCRIPT_KEYS = {
    "claim": 7,
    "heartbeat": 4,
    "finish": 4,
    "release": 4,
    "runs": 4,
    "pause": 6,
    "state": 6,
    "request": 6,
    "schedule": 7,
    "index": 0,
    "changes": 0,
}
#: The hash tag of the changelog of stored schedules: no job's can be it (a job's tag is its name
#: quoted, which never keeps a colon).
CHANGELOG_TAG = "{:schedules}"


@functools.lru_cache(maxsize=4096)  # every call of a script names its job's keys: built once per job
def _all_keys(prefix: str, job: str) -> Tuple[str, str, str, str, str, str, str]:
    """The seven keys of ``job`` in one hash tag: runs, slots, running, finished, paused, requests,
    schedule."""
    tag = f"{prefix}:{{{quote(job, safe=_SAFE)}}}"
    return (
        f"{tag}:runs", f"{tag}:slots", f"{tag}:running", f"{tag}:finished", f"{tag}:paused", f"{tag}:requests",
        f"{tag}:schedule",
    )  # fmt: skip


def job_keys(prefix: str, job: str) -> Tuple[str, str, str, str]:
    """The four keys of ``job``'s runs (runs, slots, running, finished), in one hash tag."""
    runs, slots, running, finished = _all_keys(prefix, job)[:4]
    return runs, slots, running, finished


def control_keys(prefix: str, job: str) -> Tuple[str, str]:
    """The two keys of ``job``'s controls (paused, requests), in the hash tag of its runs."""
    paused, requests = _all_keys(prefix, job)[4:6]
    return paused, requests


def schedule_key(prefix: str, job: str) -> str:
    """The key of ``job``'s stored schedule (rules 23 and 24), in the hash tag of its runs."""
    return _all_keys(prefix, job)[6]


def changelog_keys(prefix: str) -> Tuple[str, str, str]:
    """The changelog of stored schedules (changes.lua), in a hash tag of its own: the cursor, the
    jobs by the cursor of their newest change, and their newest records."""
    tag = f"{prefix}:{CHANGELOG_TAG}"
    return f"{tag}:cursor", f"{tag}:changed", f"{tag}:records"


class Script:
    """One Lua script, called with EVALSHA and loaded again on NOSCRIPT."""

    def __init__(self, name: str, common: str) -> None:
        self.name = name
        self.keys = SCRIPT_KEYS[name]
        own = read_text("lua", f"{name}.lua")
        numbers = {"MAX_ATTEMPTS_KEPT": str(MAX_ATTEMPTS_KEPT), "REQUESTS_KEPT": str(REQUESTS_KEPT)}
        self.source = render(f"{helpers_for(own, common)}\n{own}" if self.keys else own, **numbers)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def job_keys(self, prefix: str, job: str) -> Tuple[str, ...]:
        """The keys of ``job`` this script takes."""
        return _all_keys(prefix, job)[: self.keys]

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Union[str, int]]) -> Any:
        command = ("EVALSHA", self.sha, len(keys), *keys, *args)  # as client.evalsha sends it, two calls sooner
        try:
            return client.execute_command(*command)
        except Exception as exc:  # redis-py's exceptions are looked up only when a call fails
            if not isinstance(exc, require("redis", extra="redis", store="RedisStore").exceptions.NoScriptError):
                raise
        client.script_load(self.source)
        return client.execute_command(*command)

    def many(
        self, client: Any, calls: Sequence[Tuple[Sequence[str], Sequence[Union[str, int]]]], wait: Wait = None
    ) -> Tuple[List[Any], Optional[int]]:
        """Each of ``calls`` (keys, args) in one pipeline (:func:`run_scripts`): one round trip (one
        per node of a cluster), each script atomic on its own; the replies in order, an error in the
        place of a call that failed. With ``wait`` (replicas, ms), the fewest replicas that
        confirmed them comes second (None without ``wait``)."""
        return run_scripts(client, [(self, keys, args) for keys, args in calls], wait)


#: A write's wait for its replicas: (how many, for at most how many ms), or None for none.
Wait = Optional[Tuple[int, int]]
#: One call of a script: the script, its keys and its args.
ScriptCall = Tuple[Script, Sequence[str], Sequence[Union[str, int]]]


def run_scripts(
    client: Any, calls: Sequence[ScriptCall], wait: Wait = None, transaction: bool = False
) -> Tuple[List[Any], Optional[int]]:
    """Each of ``calls`` in one pipeline: one round trip (one per node of a cluster), each script
    atomic on its own, or with ``transaction`` all of them in one ``MULTI``/``EXEC``, atomic
    together (never on a cluster: its calls may lie on several nodes). The replies in order, an
    error in the place of a call that failed. Calls the server answered ``NOSCRIPT`` (it ran
    nothing for them) are sent again once their scripts are loaded: those alone, or in a
    transaction each call from the first of them on (the later ones ran without it). With
    ``wait`` (replicas, ms), a ``WAIT`` follows the calls on each node, in the same round trip:
    the fewest replicas that confirmed them comes second (None without ``wait``)."""
    replies, acks = _pipelined(client, calls, wait, transaction)
    missing = [i for i, reply in enumerate(replies) if _no_script(reply)]
    if missing:
        for script in {calls[i][0].name: calls[i][0] for i in missing}.values():
            client.script_load(script.source)
        again = list(range(missing[0], len(calls))) if transaction else missing
        replies_again, acks_again = _pipelined(client, [calls[i] for i in again], wait, transaction)
        for i, reply in zip(again, replies_again):
            replies[i] = reply
        acks = None if acks is None or acks_again is None else min(acks, acks_again)
    return replies, acks


def _pipelined(
    client: Any, calls: Sequence[ScriptCall], wait: Wait = None, transaction: bool = False
) -> Tuple[List[Any], Optional[int]]:
    pipe = client.pipeline(transaction=False)  # a MULTI of its own: the WAIT must follow the EXEC
    # A cluster pipeline of redis-py 8 asks a node for the keys of each EVALSHA (COMMAND GETKEYS,
    # a round trip per call) unless it is told the node: the node holding the call's first key
    # (a job's keys share one slot). A call redirected (MOVED) is sent again by slot, as usual.
    node_of = None if transaction else getattr(client, "get_node_from_key", None)
    nodes: Dict[str, Any] = {}
    if transaction:
        pipe.execute_command("MULTI")
    for script, keys, args in calls:
        options = {"target_nodes": node_of(keys[0])} if node_of is not None and keys else {}
        if options:
            nodes.setdefault(options["target_nodes"].name, options["target_nodes"])
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args, **options)
    if transaction:
        pipe.execute_command("EXEC")
    # rule 22: WAIT on each connection that wrote, after its writes (a cluster: one per node)
    targets = [] if wait is None else [{"target_nodes": node} for node in nodes.values()] or [{}]
    for options in targets:
        pipe.execute_command("WAIT", *wait, **options)  # type: ignore[misc]
    replies = list(pipe.execute(raise_on_error=False))
    acks = replies[len(replies) - len(targets) :]
    failed = next((reply for reply in acks if isinstance(reply, Exception)), None)
    if transaction:  # MULTI's OK, a QUEUED per call (else EXEC refuses them all), EXEC's list of the replies
        failed = failed or next((reply for reply in replies[: len(calls) + 2] if isinstance(reply, Exception)), None)
    if failed is not None:
        raise failed
    if transaction:
        replies = list(replies[len(calls) + 1])
    return replies[: len(calls)], min(int(reply) for reply in acks) if targets else None


def _no_script(reply: Any) -> bool:
    return isinstance(reply, Exception) and isinstance(
        reply, require("redis", extra="redis", store="RedisStore").exceptions.NoScriptError
    )


_HELPER = re.compile(r"^local function (\w+)\(", re.M)
_LINE_COMMENT = re.compile(r"--.*$", re.M)
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")  # a field (run.save) is no name


def _names(text: str) -> Set[str]:
    """The names Lua code ``text`` uses, its comments left out."""
    return set(_NAME.findall(_LINE_COMMENT.sub("", text)))


@functools.lru_cache(maxsize=4)
def _paragraphs(common: str) -> Tuple[List[str], Dict[str, Tuple[int, Set[str]]]]:
    """common.lua's paragraphs, and for each helper its paragraph and the helpers it names."""
    paragraphs = common.split("\n\n")
    found = {match.group(1): i for i, p in enumerate(paragraphs) for match in [_HELPER.search(p)] if match}
    return paragraphs, {name: (i, _names(paragraphs[i]) & found.keys()) for name, i in found.items()}


def helpers_for(script: str, common: str) -> str:
    """``common`` (common.lua) with only the helpers ``script`` names, and those they name.

    Redis runs the whole text of a script at each call, so each helper is a closure made anew at
    every call, whether the script calls it or not: a heartbeat should not make the requests'
    helpers, nor a claim the job states'. common.lua is paragraphs (blank-line separated): one per
    helper (``local function <name>(``, with its comment), the others (comments, keys, constants)
    kept in any case; the order stays.
    """
    paragraphs, helpers = _paragraphs(common)
    needed: Set[str] = set()
    todo = _names(script) & helpers.keys()
    while todo:
        name = todo.pop()
        needed.add(name)
        todo |= helpers[name][1] - needed
    dropped = {helpers[name][0] for name in helpers.keys() - needed}
    return "\n\n".join(p for i, p in enumerate(paragraphs) if i not in dropped)


def load_scripts() -> Dict[str, Script]:
    """Every script of the store, by name, rendered and ready to call."""
    common = read_text("lua", "common.lua")
    return {name: Script(name, common) for name in SCRIPT_KEYS}


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

    def unreadable() -> str:  # the message is made only for a run that is
        return f"the stored run of job {job!r} at slot {slot_text} is unreadable"

    data = _json(raw, unreadable) if raw is not None else None
    if type(data) is not dict:
        raise StoreError(f"{unreadable()}: {shown(data)} is no JSON object")
    return read_record(job, slot_text, data).to_run()


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


def read_claim(job: str, reply: Sequence[Any]) -> ClaimReply:
    """The answer of claim.lua's ``reply``."""
    outcome, at, raw = reply[:3]
    claim = Claim(text(outcome), None if raw is None else read_run(job, at, raw))
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
