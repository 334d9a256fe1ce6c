"""The instances' thread profiles (``burst.py --profile DIR``), summed up by kind of thread.

Each instance wrote one ``pstats`` file per thread it started
(:class:`burstlib.instance.ThreadProfiles`); here the files of one store's
run are added up per kind of thread (the claim pool, the scheduler, the
workers that run handlers and heartbeats) and the functions that took the
most CPU time of their own (``tottime``) are printed, with the CPU time spent
in them and below (``cumtime``); each thread is timed by its own CPU clock,
so a wait (a lock, a socket, the GIL) costs nothing. Profiling
slows every Python call down, so a profiled run's lag is not the
benchmark's figure: profile in a run of its own.
"""

from __future__ import annotations

import glob
import os
import pstats
from collections import defaultdict
from typing import Dict, List, Optional

#: The functions printed per kind of thread.
TOP = 12


#: What the profiles cover, as :func:`print_profiles` says by default (``burst.py``'s).
WINDOW = "the instances' threads over the window (the burst and its backups' checks)"


def print_profiles(directory: str, top: int = TOP, what: str = WINDOW) -> None:
    """The top functions (by own time) of each kind of thread, all instances' threads added up;
    ``what`` says whose threads, over what time."""
    files: Dict[str, List[str]] = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(directory, "*.prof"))):
        kind = os.path.basename(path)[: -len(".prof")].split("-", 2)[2]
        files[kind].append(path)
    if not files:
        print(f"  profiles: none written in {directory}")
        return
    print(f"  profiles of {what}, in {directory}:")
    skipped: List[str] = []
    for kind, paths in sorted(files.items()):
        stats = read_stats(paths, skipped)
        if stats is None:
            continue
        total = stats.total_tt  # type: ignore[attr-defined]
        threads = len(paths) - sum(1 for path in skipped if path in paths)
        print(f"    {kind}: {threads} threads, {total:.2f} s of CPU; the top {top}:")
        print(f"      {'own CPU s':>9} {'cum CPU s':>9} {'calls':>9}  function")
        rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]  # type: ignore[attr-defined]
        for (file, line, name), (_, calls, tottime, cumtime, _) in rows:
            where = f"{_short(file)}:{line}({name})" if line else name
            print(f"      {tottime:9.2f} {cumtime:9.2f} {calls:9d}  {where}")
    if skipped:
        names = ", ".join(os.path.basename(path) for path in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        print(f"    ({len(skipped)} profile files skipped, empty or unreadable: {names})")


def read_stats(paths: List[str], skipped: List[str]) -> Optional[pstats.Stats]:
    """The profiles of ``paths`` added up; a file ``pstats`` cannot read (empty, cut short, not a
    profile) is left out and appended to ``skipped``; None if none could be read."""
    stats: Optional[pstats.Stats] = None
    for path in paths:
        try:
            one = pstats.Stats(path)
        except (TypeError, ValueError, EOFError, OSError):  # pstats says TypeError for an empty profile
            skipped.append(path)
            continue
        if stats is None:
            stats = one
        else:
            stats.add(one)
    return stats


def _short(path: str) -> str:
    """A source path from the package or library's folder on (``leasecron/engine/claims.py``)."""
    parts = path.replace(os.sep, "/").split("/")
    for anchor in ("leasecron", "redis", "psycopg2", "site-packages", "benchmarks"):
        if anchor in parts[:-1]:
            return "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor) :])
    return "/".join(parts[-2:])
