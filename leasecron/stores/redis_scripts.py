"""The Redis store's keys and its Lua scripts.

:class:`~leasecron.stores.redis.RedisStore` explains the keys and why they
are laid out so. This module names them (:func:`job_keys`,
:func:`control_keys`, :func:`schedule_key`, :func:`changelog_keys`), loads the
scripts of ``stores/lua/`` with the numbers of the protocol rendered in
(:func:`load_scripts`) and runs several in one round trip (:func:`run_scripts`);
:mod:`~leasecron.stores.redis_replies` turns their arguments and replies into
Python values.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union
from urllib.parse import quote

from ..runs import MAX_ATTEMPTS_KEPT
from . import require
from .base import REQUESTS_KEPT
from .templates import read_text, render

__all__ = [
    "Script",
    "load_scripts",
    "job_keys",
    "control_keys",
    "schedule_key",
    "changelog_keys",
    "instances_keys",
    "run_scripts",
]

_SAFE = "._-"  # with letters and digits: the bytes a job name keeps in its key

#: The scripts of ``stores/lua/``, each with how many of a job's keys it takes (0: none, see index.lua
#: and changes.lua).
SCRIPT_KEYS = {
    "claim": 7,
    "heartbeat": 4,
    "finish": 4,
    "finish_many": 4,  # per finish
    "release": 4,
    "record_return": 4,
    "runs": 4,
    "overview": 5,
    "pause": 6,
    "state": 6,
    "request": 6,
    "schedule": 7,
    "index": 0,
    "changes": 0,
    "instances": 0,
}
#: The hash tag of the changelog of stored schedules: no job's can be it (a job's tag is its name
#: quoted, which never keeps a colon).
CHANGELOG_TAG = "{:schedules}"
#: The hash tag of the instances' announcements.
INSTANCES_TAG = "{:instances}"


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


def instances_keys(prefix: str) -> Tuple[str, str]:
    """The instances' announcements (instances.lua), in a hash tag of its own: the bodies by
    runner, and the runners by when each was last seen."""
    tag = f"{prefix}:{INSTANCES_TAG}"
    return f"{tag}:bodies", f"{tag}:seen"


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
    node_of = None if transaction or not hasattr(client, "get_node_from_key") else functools.partial(_node_of, client)
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


@functools.lru_cache(maxsize=65_536)
def cluster_slot(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (redis-py's CRC16 of its hash tag), computed once per
    key: a job's keys are the same at every claim, heartbeat and finish."""
    return int(require("redis", extra="redis", store="RedisStore").crc.key_slot(key.encode("utf-8")))


def _node_of(client: Any, key: str) -> Any:
    """The primary node holding ``key``'s slot, as ``client.get_node_from_key`` finds it, without
    hashing the key again; the client's own lookup (and its error) when its map lacks the slot."""
    nodes = client.nodes_manager.slots_cache.get(cluster_slot(key))
    return nodes[0] if nodes else client.get_node_from_key(key)


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
