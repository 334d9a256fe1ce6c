"""The cost of waiting for replicas (rule 22): each store operation with ``replicas=0``, 1 and 2 on
one replicated Redis, as ratios to ``replicas=0`` measured in the same run.

    python benchmarks/replicas.py [--store redis+sentinel://...] [--ops 200] [--rounds 11]

Without ``--store`` it starts a topology of its own on 127.0.0.1 (a primary, two replicas and
three Sentinels of ``redis-server``: ``tests/replicated.py``) and stops it at the end. Each round
measures every operation of ``store_ops.py`` once per ``replicas`` value, the values taking turns
(the first rotating), on one store each; the figures are medians over the rounds: the p50 of each
operation, its ratio to the same round's ``replicas=0``, and the round trips each cost. A write
waits for its ``WAIT`` in the same round trip: the replicas' acknowledgement, on loopback, is the
floor of what a write with ``replicas>=1`` costs more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: leasecron and tests

import leasecron  # noqa: E402
from speedlib.counting import CallCounter  # noqa: E402
from speedlib.operations import OPERATIONS, measure  # noqa: E402
from speedlib.urls import replace_option  # noqa: E402

#: The values of ``replicas`` compared, the first one the baseline.
REPLICAS = (0, 1, 2)


def main(argv: List[str]) -> int:
    """Measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="a Redis/Valkey URL with two replicas (default: a topology of its own)")
    parser.add_argument("--ops", type=int, default=200, help="operations per round and value (default 200)")
    parser.add_argument("--rounds", type=int, default=11, help="rounds; the median is shown (default 11)")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = args.store
        if url is None:
            from tests.replicated import Replicated
            from tests.servers import server_binary

            binary = server_binary("redis")
            if binary is None:
                parser.error("no redis-server on PATH: give --store")
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            topology = stack.enter_context(Replicated(str(binary), directory))
            url = topology.url()
            print(f"topology: a primary, 2 replicas, 3 Sentinels of {Path(str(binary)).name} on 127.0.0.1")
        p50: Dict[int, Dict[str, List[float]]] = {n: {} for n in REPLICAS}
        ratio: Dict[int, Dict[str, List[float]]] = {n: {} for n in REPLICAS}
        trips: Dict[int, Dict[str, List[float]]] = {n: {} for n in REPLICAS}
        for n in REPLICAS:  # a warm-up, untimed: every script loaded on the server, every pool connected
            store = leasecron.open_store(replace_option(url, "replicas", str(n)))
            try:
                measure(store, 10, 1, CallCounter(store))
            finally:
                store.close()
        for round_ in range(args.rounds):
            order = REPLICAS[round_ % len(REPLICAS):] + REPLICAS[: round_ % len(REPLICAS)]
            figures = {}
            for n in order:
                store = leasecron.open_store(replace_option(url, "replicas", str(n)))
                try:
                    figures[n] = measure(store, args.ops, 1, CallCounter(store))
                finally:
                    store.close()
            for n in REPLICAS:
                for op in OPERATIONS:
                    p50[n].setdefault(op, []).append(figures[n][op].p50)
                    ratio[n].setdefault(op, []).append(figures[n][op].p50 / figures[0][op].p50)
                    trips[n].setdefault(op, []).append(figures[n][op].calls or 0.0)
            print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    print(f"{time.strftime('%Y-%m-%d')}: {args.rounds} rounds x {args.ops} operations per value, 1 thread")
    print("p50 in us (median over the rounds); x0: the median of each round's ratio to replicas=0")
    header = f"{'operation':<18}" + "".join(f"{f'replicas={n}':>14}{'x0':>7}{'trips':>7}" for n in REPLICAS)
    print(header)
    for op in OPERATIONS:
        cells = "".join(
            f"{statistics.median(p50[n][op]):>14.1f}{statistics.median(ratio[n][op]):>7.2f}"
            f"{statistics.median(trips[n][op]):>7.2f}"
            for n in REPLICAS
        )
        print(f"{op:<18}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
