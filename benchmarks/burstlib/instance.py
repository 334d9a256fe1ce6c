"""The instance process of ``burst.py``: ``fire_lag.py``'s instance, counted and timed as ``burst.py`` asks.

``fire_lag.instance_main`` runs unchanged (the same ``LeaseCron``, jobs,
handler, window and output file); the names of ``fire_lag`` it looks up
are set before it runs, in this process only:

* its count at the client (``fire_lag``'s ``wire``) is :class:`RoundTrips`:
  on Redis and Valkey the requests this process writes to a server's socket,
  each one a round trip: a single command is one, and so is a pipeline's
  batch to one node; a new connection's set-up (redis-py's ``CLIENT SETINFO``
  commands) counts too: a burst's finishes, all at once, open more of the
  pool's connections (``speedlib.counting.CallCounter``, which ``fire_lag`` uses,
  counts the commands sent through the client's ``execute_command``, which a
  pipeline's commands never pass: a ``claim_many`` would count 0). On
  PostgreSQL (statements: every one a round trip, the store's connections
  being in autocommit) and SQLite (transactions) it is
  ``speedlib.counting.CallCounter`` itself;
* ``LEASECRON_BURST_WARMUP_S`` in its environment (``burst.py``'s
  ``--warmup-gap``) sets ``fire_lag.BURST_WARMUP_S``, as in the parent: how
  long before the measured slot its jobs' warm-up slot comes;
* ``LEASECRON_BURST_TAIL_S`` (``--tail``) makes ``fire_lag.register_jobs``
  answer a heartbeat of at least (tail - 1 s) / 2: fire_lag's window, which
  closes 2 heartbeats + 1 s after the measured slot, then closes the tail
  after it (and the parent, told that heartbeat, stops the instances then).
  The jobs keep their own heartbeat (5 s): only the window is longer;
* ``burst.py --profile`` is ``fire_lag.py``'s: the parent gives the
  instances ``--profile <dir>`` (``fire_lag.run_phase``), and each profiles
  its threads from the opening of the window (0.5 s before the measured slot)
  to its stop (:class:`burstlib.threads.ThreadProfiles`);
* with ``LEASECRON_BURST_STORED`` in its environment (``burst.py --stored``)
  it registers a task instead of the jobs, which the parent stored
  (``burstlib.stored``).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, List, Optional

import fire_lag
from speedlib.counting import CallCounter

from leasecron import Store
from leasecron.stores.redis import RedisStore

from .stored import STORED_ENV, register_task

#: The environment variable that gives the instances the warm-up slot's lead on the measured one, in s.
WARMUP_ENV = "LEASECRON_BURST_WARMUP_S"
#: The environment variable that keeps the instances' window (and the instances) open this long after
#: the measured slot, in s, if that is longer than fire_lag's 2 heartbeats + 1 s.
TAIL_ENV = "LEASECRON_BURST_TAIL_S"
#: What :class:`RoundTrips` counts on Redis/Valkey (``burst.py`` checks the instances said so).
REDIS_UNIT = "round trips (socket writes)"


class RoundTrips:
    """What the store's calls cost at the client: round trips on Redis/Valkey (see the module's
    docstring), as ``speedlib.counting.CallCounter`` counts elsewhere. ``total()`` and ``unit`` as that
    class has them (all that ``fire_lag.instance_main`` asks of it)."""

    def __init__(self, store: Store) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._other: Optional[CallCounter] = None
        if isinstance(store, RedisStore):
            self.unit = REDIS_UNIT
            count_socket_writes(self._add)
        else:
            self._other = CallCounter(store)
            self.unit = self._other.unit

    def _add(self) -> None:
        with self._lock:
            self._count += 1

    def total(self) -> Optional[int]:
        """Round trips (or statements, transactions) so far; None where nothing is counted."""
        if self._other is not None:
            return self._other.total()
        with self._lock:
            return self._count


def count_socket_writes(add: Callable[[], None]) -> None:
    """Call ``add()`` on every request any redis-py connection of this process writes (a command,
    or a pipeline's commands to one node, sent in one ``send_packed_command``)."""
    from redis.connection import AbstractConnection

    send = AbstractConnection.send_packed_command

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        add()
        send(self, command, check_health)

    AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]


def instance_main(argv: List[str]) -> int:
    """``fire_lag.instance_main`` with :class:`RoundTrips` as its count at the client, the
    warm-up's lead and the window's tail the parent chose (:data:`WARMUP_ENV`, :data:`TAIL_ENV`)."""
    fire_lag.CallCounter = RoundTrips  # type: ignore[misc,assignment]  # the name instance_main looks up
    if os.environ.get(STORED_ENV):  # before the tail's wrapper, which wraps it
        fire_lag.register_jobs = register_task  # type: ignore[assignment]  # the name instance_main looks up
    if os.environ.get(WARMUP_ENV):
        fire_lag.BURST_WARMUP_S = int(os.environ[WARMUP_ENV])  # read by register_jobs and instance_main
    if os.environ.get(TAIL_ENV):
        window_ms = (int(os.environ[TAIL_ENV]) * 1000 - 1000) // 2
        register = fire_lag.register_jobs

        def register_jobs(cron: Any, recorder: Any, args: Any, first_ms: int) -> int:
            return max(register(cron, recorder, args, first_ms), window_ms)

        fire_lag.register_jobs = register_jobs  # the name instance_main looks up
    return fire_lag.instance_main(fire_lag.parse_args(argv))
