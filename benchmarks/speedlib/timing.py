"""A batch of calls, timed: each call's latency and the batch's throughput, over one or more threads.

:func:`timed` is the one stopwatch of the speed benchmarks (``store_ops.py``, ``fire_lag.py``,
``scale.py --poll``): a figure of one is comparable with a figure of another.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, List, Optional


@dataclasses.dataclass
class Timing:
    """One batch of operations: latency percentiles (µs), throughput, and store calls per operation."""

    p50: float
    p99: float
    ops_s: float
    calls: Optional[float] = None


def timed(fn: Callable[[int], object], n: int, threads: int = 1) -> Timing:
    """Call ``fn(i)`` for i in range(n), spread over ``threads`` threads (i interleaved):
    each call's latency, and the calls per second of the whole batch."""
    chunks = [range(t, n, threads) for t in range(threads)]
    latencies: List[List[int]] = [[] for _ in chunks]
    errors: List[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def work(k: int) -> None:
        out = latencies[k]
        barrier.wait()
        try:
            for i in chunks[k]:
                t0 = time.perf_counter_ns()
                fn(i)
                out.append(time.perf_counter_ns() - t0)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter_ns()
    for w in workers:
        w.join()
    wall_ns = time.perf_counter_ns() - start
    if errors:
        raise errors[0]
    all_ns = sorted(x for out in latencies for x in out)
    return Timing(
        p50=all_ns[len(all_ns) // 2] / 1000,
        p99=all_ns[min(len(all_ns) - 1, int(len(all_ns) * 0.99))] / 1000,
        ops_s=n / (wall_ns / 1e9),
    )
