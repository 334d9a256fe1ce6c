"""Each thread of an instance process profiled on its own: ``burst.py --profile`` and ``fire_lag.py --profile``.

:class:`ThreadProfiles` runs every thread started after it under a
``cProfile.Profile`` of its own, timed by the thread's CPU time
(``time.thread_time``: waiting for a lock, a socket or the GIL costs nothing
there), and writes what each counted from a mark (the opening of the
benchmark's window) to the end as ``<dir>/<pid>-<n>-<kind>.prof``, where
``kind`` says which of leasecron's threads it was (:func:`thread_kind`);
:func:`burstlib.profiles.print_profiles` adds them up by kind. Nothing here
imports a benchmark script.
"""

from __future__ import annotations

import cProfile
import marshal
import os
import re
import threading
import time
from typing import Any, Dict, List, Tuple

#: leasecron's thread names (at the thread's start) and the kind each is counted as.
_KINDS = (
    (re.compile(r"^leasecron-claims"), "claim-pool"),
    (re.compile(r"^leasecron-scheduler"), "scheduler"),
    (re.compile(r"^leasecron-(run|heartbeat|worker)"), "workers"),
    (re.compile(r"^leasecron-"), "leasecron-other"),
)


def thread_kind(name: str) -> str:
    """The kind of a thread by its name when it started: ``claim-pool``, ``scheduler``,
    ``workers`` (handlers and heartbeats), ``leasecron-other`` or ``other``."""
    for pattern, kind in _KINDS:
        if pattern.match(name):
            return kind
    return "other"


class ThreadProfiles:
    """A ``cProfile.Profile`` for each thread started from now on (``threading.Thread.run`` is
    wrapped; :meth:`close` puts it back).
    :meth:`mark` notes what each has counted so far; :meth:`write` writes what each counted since
    (since its start for a thread started after the mark): an ended thread's profile as the
    thread itself took it at its end, a running one's as it is then. A thread that counted nothing
    since the mark (it ended before, or only waited) gets no file: ``pstats`` cannot read an empty
    profile (``burst.py --profile`` once failed on one)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        #: [kind, profile, its stats as the thread ended (None while it runs)] per thread
        self._profiles: List[List[Any]] = []
        self._marked: Dict[int, Dict[Any, Tuple[int, float, float]]] = {}
        #: the profiles :meth:`write` left out, counting nothing since the mark
        self.empty = 0
        run = threading.Thread.run
        profiles = self

        def profiled_run(thread: threading.Thread) -> None:
            profile = cProfile.Profile(time.thread_time)  # CPU time: a thread's waits are not in it
            entry: List[Any] = [thread_kind(thread.name), profile, None]
            with profiles._lock:
                profiles._profiles.append(entry)
            profile.enable()
            try:
                run(thread)
            finally:
                profile.disable()
                profile.snapshot_stats()  # in its own thread, no longer counting: a consistent copy
                entry[2] = dict(profile.stats)  # type: ignore[attr-defined]

        self._unwrapped = run
        threading.Thread.run = profiled_run  # type: ignore[method-assign,assignment]

    def close(self) -> None:
        """Profile no thread started from now on (``threading.Thread.run`` as it was)."""
        threading.Thread.run = self._unwrapped  # type: ignore[method-assign]

    def _taken(self) -> List[Tuple[int, str, Dict[Any, Any]]]:
        """(index, kind, stats) of every profile now: an ended thread's as it ended, a running
        thread's entries as they are."""
        with self._lock:
            profiles = [list(entry) for entry in self._profiles]
        taken = []
        for n, (kind, profile, ended) in enumerate(profiles):
            if ended is None:
                profile.snapshot_stats()
                ended = dict(profile.stats)
            taken.append((n, kind, ended))
        return taken

    def mark(self) -> None:
        """From now on: what :meth:`write` writes is counted from here."""
        taken = self._taken()
        self._marked = {n: {f: (nc, tt, ct) for f, (_, nc, tt, ct, _) in stats.items()} for n, _, stats in taken}

    def write(self) -> None:
        """Each thread's profile since the mark, in ``pstats``'s file format (without callers),
        written whole or not at all (a new name, then renamed); none for a thread that counted
        nothing since (:attr:`empty` counts them)."""
        for n, kind, stats in self._taken():
            before = self._marked.get(n, {})
            since: Dict[Any, Any] = {}
            for func, (cc, nc, tt, ct, _) in stats.items():
                nc0, tt0, ct0 = before.get(func, (0, 0.0, 0.0))
                if nc > nc0 or tt > tt0:
                    since[func] = (max(cc - nc0, 0), nc - nc0, tt - tt0, ct - ct0, {})
            if not since:
                self.empty += 1
                continue
            path = os.path.join(self.directory, f"{os.getpid()}-{n}-{kind}.prof")
            with open(path + ".tmp", "wb") as f:
                marshal.dump(since, f)
            os.replace(path + ".tmp", path)
