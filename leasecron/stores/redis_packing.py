"""How the Redis store's commands are packed into the protocol: with hiredis, at once.

redis-py packs a command with hiredis when it is installed, but first runs a Python function on
each argument (its ``Encoder.encode``, and a check for memoryviews): for a claim's ``EVALSHA`` of
20 arguments that is about 15 µs, where ``hiredis.pack_command`` alone takes about 2 µs, and
every instance sends a claim for every slot of every job. :class:`HiredisPacker` hands a
command whose arguments are all text, bytes or integers (every command the store sends) to
hiredis as it is, and any other to redis-py's own packer, so that what reaches the server is the
same bytes either way (``str`` as UTF-8, an ``int`` as its decimal text). redis-py takes it as
a connection's ``command_packer``; the store gives it to the clients it makes of one server or
through Sentinel, unless the caller chose an encoding or a packer of their own.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = ["HiredisPacker", "command_packer"]

#: The argument types hiredis packs exactly as redis-py's encoder would (``bool``, a subclass of
#: ``int`` that redis-py refuses, and ``float``, whose text may differ, go to redis-py).
_PLAIN = frozenset((str, bytes, int))


class HiredisPacker:
    """A redis-py command packer: ``hiredis.pack_command`` for plain arguments, else ``fallback``."""

    __slots__ = ("_pack", "_fallback")

    def __init__(self, pack: Any, fallback: Any) -> None:
        self._pack = pack
        self._fallback = fallback

    def pack(self, *args: Any) -> List[bytes]:
        """The command ``args`` in the protocol: one bytes value, or what ``fallback`` packs."""
        types = set(map(type, args))
        if not types <= _PLAIN:
            if not all(t in _PLAIN or _plain_text(t) for t in types):
                return self._fallback.pack(*args)  # type: ignore[no-any-return]
            # a str Enum member (a claim's reason): its text, as redis-py's str.encode sends it
            args = tuple(a if type(a) in _PLAIN else str.__str__(a) for a in args)
        first = args[0]
        # a first argument with a space ("CONFIG GET") is split by redis-py: its packer does that
        if (b" " if type(first) is bytes else " ") in first:
            return self._fallback.pack(*args)  # type: ignore[no-any-return]
        return [self._pack(args)]


def _plain_text(kind: type) -> bool:
    """Whether ``kind`` is a ``str`` whose encoding redis-py leaves to ``str.encode``."""
    return issubclass(kind, str) and kind.encode is str.encode


def command_packer(redis: Any, client_options: Dict[str, Any]) -> Optional[HiredisPacker]:
    """The packer for a client of ``redis`` (the redis-py module) made with ``client_options``;
    None when hiredis is not installed, this redis-py packs otherwise, or the options choose an
    encoding or a packer (redis-py's own packer then does as they say)."""
    if {"encoding", "encoding_errors", "command_packer"} & set(client_options):
        return None
    connection = getattr(redis, "connection", None)
    serializer = getattr(connection, "PythonRespSerializer", None)
    encoder = getattr(getattr(redis, "_parsers", None), "Encoder", None)
    if not getattr(connection, "HIREDIS_AVAILABLE", False) or serializer is None or encoder is None:
        return None
    try:
        import hiredis
    except ImportError:  # pragma: no cover - HIREDIS_AVAILABLE says it imports
        return None
    pack = getattr(hiredis, "pack_command", None)
    if pack is None:
        return None
    fallback = serializer(6000, encoder("utf-8", "strict", False).encode)  # redis-py's defaults
    return HiredisPacker(pack, fallback)
