"""What a job's kept history costs a SQLite claim: a winning claim at several ``history_size``.

    python benchmarks/sqlite_history.py [--sizes 100,1000,10000] [--claims 500] [--rounds 3]

For each size H, on a fresh SQLite file in a temporary directory (deleted at
the end), one job first runs H slots (claim won, finish success; untimed), so
that it keeps H finished runs as a job of a long-lived service does; then
``--claims`` more slots are claimed and finished, each claim timed. It prints
the p50 and p99 of those winning claims (the median over the rounds) and two
ratios measured in the same run: to the bare round trip of the same file
(``BEGIN IMMEDIATE`` + one ``INSERT`` + ``COMMIT``, as ``store_ops.py``) and
to the claim at the first size. A claim that reads only what it needs costs
the same at every size: the ratio to the first size stays near 1.

Only SQLite: the other stores never scan a history (Redis keeps sorted sets,
PostgreSQL counts finished runs per job), and a benchmark that writes 10,000
runs has no place on a shared server.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from speedlib.bare import bare_round_trip

from leasecron import SQLiteStore, __version__

#: A slot spacing, and how far back the first slot lies: far enough for 10,000+ slots.
STEP_MS = 1_000
NEVER_LATE = 10**12


def fill(store: SQLiteStore, job: str, first_ms: int, count: int, history: int) -> None:
    """Run ``count`` slots of ``job`` from ``first_ms`` (claim won, finish success)."""
    for i in range(count):
        slot = first_ms + i * STEP_MS
        claim = store.claim(job, slot, runner="bench", max_late_ms=NEVER_LATE, history_size=history)
        assert claim.run is not None, claim
        store.finish(job, slot, claim.run.token, "success")


def timed_claims(store: SQLiteStore, job: str, first_ms: int, count: int, history: int) -> List[float]:
    """Claim (timed) and finish ``count`` slots from ``first_ms``; the claims' times in µs."""
    times = []
    for i in range(count):
        slot = first_ms + i * STEP_MS
        began = time.perf_counter()
        claim = store.claim(job, slot, runner="bench", max_late_ms=NEVER_LATE, history_size=history)
        times.append((time.perf_counter() - began) * 1e6)
        assert claim.run is not None, claim
        store.finish(job, slot, claim.run.token, "success")
    return times


def bare_us(store: SQLiteStore, count: int) -> float:
    """The p50 of the bare round trip on the store's file, in µs."""
    times = []
    with bare_round_trip(store) as op:
        for i in range(count):
            began = time.perf_counter()
            op(i)
            times.append((time.perf_counter() - began) * 1e6)
    return statistics.median(times)


def one_round(directory: str, sizes: List[int], claims: int) -> Tuple[float, Dict[int, Tuple[float, float]]]:
    """Each size on a fresh file: the bare p50 (of the first file) and (p50, p99) per size, in µs."""
    bare: Optional[float] = None
    figures: Dict[int, Tuple[float, float]] = {}
    for size in sizes:
        path = os.path.join(directory, f"history-{size}.db")
        store = SQLiteStore(path)
        try:
            first = store.now_ms() - (size + claims + 10) * STEP_MS
            first -= first % STEP_MS
            fill(store, "job", first, size, size)
            times = timed_claims(store, "job", first + size * STEP_MS, claims, size)
            if bare is None:
                bare = bare_us(store, claims)
            times.sort()
            figures[size] = (statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))])
        finally:
            store.close()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
    assert bare is not None
    return bare, figures


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="history sizes, comma-separated")
    parser.add_argument("--claims", type=int, default=500, help="timed claims per size (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is shown (default 3)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes must be integers separated by commas, not {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.claims < 1 or args.rounds < 1:
        parser.error("--sizes, --claims and --rounds must be at least 1")

    directory = tempfile.mkdtemp(prefix="leasecron-history-")
    try:
        rounds = [one_round(directory, sizes, args.claims) for _ in range(args.rounds)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    bare = statistics.median(b for b, _ in rounds)
    p50 = {s: statistics.median(r[s][0] for _, r in rounds) for s in sizes}
    p99 = {s: statistics.median(r[s][1] for _, r in rounds) for s in sizes}

    print(f"leasecron {__version__}, SQLite, Python {sys.version.split()[0]}; {args.rounds} rounds of"
          f" {args.claims} winning claims per history size; medians over the rounds")  # fmt: skip
    print(f"bare round trip (BEGIN IMMEDIATE + INSERT + COMMIT): {bare:.1f} us")
    print(f"{'history_size':>12} {'p50 us':>9} {'p99 us':>9} {'x bare':>8} {'x first':>8}")
    for size in sizes:
        print(f"{size:>12,} {p50[size]:9.1f} {p99[size]:9.1f} {p50[size] / bare:8.2f} {p50[size] / p50[sizes[0]]:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
