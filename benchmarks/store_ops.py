"""Store operation latency against the bare round trip of the same store.

    python benchmarks/store_ops.py [--store URL] [--ops N] [--rounds R] [--threads 1,8] [--baseline-ref REF]

For each operation (claim won, claim lost, heartbeat, finish, release; and
20 single finishes against one ``finish_many`` of 20, per group of 20) it
prints p50 and p99 latency and ops/s with 1 and with 8 threads (medians over
R rounds of N operations), the ratio of each p50 to the bare round trip
measured in the same run, and what each operation cost the store, counted:
round trips on Redis/Valkey (commands sent by the store's client), statements
on PostgreSQL (sent by the store's cursor), transactions on SQLite. Every
job has run one slot before (untimed): the claims measured are those of a
job's steady state. The baselines:

* SQLite: ``BEGIN IMMEDIATE`` + one ``INSERT`` + ``COMMIT`` on the same file,
  with the same pragmas (WAL, synchronous=NORMAL);
* Redis/Valkey: ``EVALSHA`` of a script that only returns 1, with the same
  four keys a leasecron script takes, on the store's own client (one round
  trip and a script call, nothing more); ``PING`` is shown beside it;
* PostgreSQL: ``SELECT 1`` on an autocommit connection taken from the
  store's own pool (the same kind of connection every operation uses; one
  round trip, no table, no function); a one-row ``INSERT … ON CONFLICT DO
  NOTHING`` committed on it is shown beside it (a write's commit flushes the WAL);
* memory: taking and releasing a ``threading.Lock`` (the floor of any
  operation under the store's lock).

The default store is a fresh SQLite file in a temporary directory.

``--baseline-ref REF`` compares two versions instead, in one invocation: the
``leasecron`` of git commit REF (before) and the one next to this script
(after), each in a process of its own on a store of its own, measured the same
way in alternating rounds; it prints after/before per operation, and the
issue-14 target (a claim within 5 % of the baseline's). Its rounds are many
and short unless told (``--ops 50 --rounds 201``: see
``benchmarks/speedlib/baseline.py``). For example::

    python benchmarks/store_ops.py --baseline-ref a486df3 --store postgresql://root@127.0.0.1/test

On PostgreSQL the benchmark leaves nothing behind. Without ``schema=`` in the
URL it creates a fresh schema ``leasecron_bench_<pid>`` (and refuses to run if
one of that name exists, so it never drops what it did not make), runs in it,
and drops it at the end, also after an error, Ctrl-C or SIGTERM (a SIGKILL
leaves it: ``DROP SCHEMA leasecron_bench_<pid> CASCADE``). With ``schema=``
it deletes the rows of the jobs it claimed after each round; the store's
tables and functions stay in that schema (as leasecron itself would create
them on first use), and a schema the benchmark had to create is dropped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from typing import Dict, Optional
from urllib.parse import urlsplit

from speedlib.counting import CallCounter
from speedlib.operations import measure
from speedlib.pg_schema import postgres_bench_store
from speedlib.sigterm import exit_on_sigterm
from speedlib.timing import Timing

import leasecron
from leasecron.stores import MemoryStore, Store


#: The rounds of ``--baseline-ref`` unless told: many short ones (speedlib/baseline.py says why).
BASELINE_OPS = 50
BASELINE_ROUNDS = 201

#: The targets (issue 6; SQLite's as issue 30 set them): (operation, baseline, at most this many
#: times the baseline's p50). A losing claim is measured as the engine sends it: "claim (brief)".
TARGETS = {
    "redis": [("claim (won)", "bare round trip", 1.5), ("claim (brief)", "bare round trip", 1.5)],
    "postgresql": [("claim (won)", "bare INSERT", 1.25), ("claim (brief)", "bare round trip", 1.5)],
    "sqlite": [("claim (won)", "bare round trip", 3.0), ("claim (brief)", "bare round trip", 1.5)],
}


def run_rounds(store: Store, ops: int, rounds: int, threads: int, counter: CallCounter) -> Dict[str, Timing]:
    """``rounds`` rounds; per figure the median over the rounds."""
    done = [measure(store, ops, threads, counter) for _ in range(rounds)]

    def median(name: str, field: str) -> Optional[float]:
        values = [getattr(r[name], field) for r in done if getattr(r[name], field) is not None]
        return statistics.median(values) if values else None

    return {
        name: Timing(
            p50=median(name, "p50") or 0.0,
            p99=median(name, "p99") or 0.0,
            ops_s=median(name, "ops_s") or 0.0,
            calls=median(name, "calls"),
        )
        for name in done[0]
    }


def report(kind: str, unit: str, threads: int, figures: Dict[str, Timing]) -> None:
    """The table of one thread count, and the targets."""
    base = figures["bare round trip"].p50
    print(f"\n{threads} thread{'s' if threads > 1 else ''}:")
    print(f"{'operation':<18} {'p50 us':>9} {'p99 us':>9} {'ops/s':>9} {'x bare':>7} {unit + '/op':>16}")
    for name, t in figures.items():
        calls = "" if t.calls is None else f"{t.calls:.2f}"
        print(f"{name:<18} {t.p50:9.1f} {t.p99:9.1f} {t.ops_s:9.0f} {t.p50 / base:7.2f} {calls:>16}")
    singly, together = figures.get("finish x20"), figures.get("finish_many (20)")
    if singly is not None and together is not None:
        print(f"finish_many of 20: {together.p50 / singly.p50:.2f}x the time of 20 single finishes (p50)")
    for op, baseline, limit in TARGETS.get(kind, []):
        ratio = figures[op].p50 / figures[baseline].p50
        verdict = "met" if ratio <= limit else "MISSED"
        print(f"target {op} <= {limit}x {baseline} (p50): {ratio:.2f}x, {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--ops", type=int, help="operations per round (default 400; with --baseline-ref 50)")
    parser.add_argument("--rounds", type=int, help="rounds; the median is shown (default 5; with --baseline-ref 201)")
    parser.add_argument("--threads", default="1,8", help="thread counts, comma-separated (default 1,8)")
    parser.add_argument("--baseline-ref", metavar="REF", help="measure the leasecron of git commit REF too, beside"
                        " this one, in one run (speedlib/baseline.py)")  # fmt: skip
    parser.add_argument("--serve", choices=["before", "after"], help=argparse.SUPPRESS)  # a --baseline-ref child
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    short = bool(args.baseline_ref or args.serve)  # many short rounds: see speedlib/baseline.py
    args.ops = args.ops if args.ops is not None else (BASELINE_OPS if short else 400)
    args.rounds = args.rounds if args.rounds is not None else (BASELINE_ROUNDS if short else 5)
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.serve or args.baseline_ref:
        from speedlib import baseline  # benchmarks/ is on sys.path: this file's directory

        args.script = os.path.abspath(__file__)
        return baseline.serve(args) if args.serve else baseline.compare(args)
    exit_on_sigterm()
    note = ""
    results: Dict[int, Dict[str, Timing]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{os.path.join(tmp, 'bench.db')}"
        if urlsplit(url).scheme.lower() in ("postgresql", "postgres"):
            with postgres_bench_store(url) as (pg, owned):
                note = f", {pg.server_version()}, schema {pg.schema}"
                note += " (created and dropped by the benchmark)" if owned else ""
                counter = CallCounter(pg)
                for threads in thread_counts:
                    results[threads] = run_rounds(pg, args.ops, args.rounds, threads, counter)
            store: Store = pg
        else:
            store = leasecron.open_store(url)
            counter = CallCounter(store)
            try:
                note = f", {store.server_version()}" if not isinstance(store, MemoryStore) else ""
                for threads in thread_counts:
                    results[threads] = run_rounds(store, args.ops, args.rounds, threads, counter)
            finally:
                store.close()
    kind = "memory" if isinstance(store, MemoryStore) else store.kind
    where = f"{args.store}{note}" if args.store else f"temporary SQLite file{note}"
    print(f"leasecron {leasecron.__version__}, store {kind} ({where})")
    print(f"{args.rounds} rounds x {args.ops} operations; medians over the rounds; Python {sys.version.split()[0]}")
    print("bare round trip: " + BASELINES.get(kind, "taking and releasing a lock"))
    if counter.unit:
        print(f"{counter.unit}/op: {COUNTED[counter.unit]}")
    for threads, figures in results.items():
        report("redis" if kind == "valkey" else kind, counter.unit or "calls", threads, figures)
    return 0


#: What the baseline is, per store kind.
BASELINES = {
    "sqlite": "BEGIN IMMEDIATE + one INSERT + COMMIT on the same file (WAL, synchronous=NORMAL)",
    "redis": "EVALSHA of 'return 1' with a job's four keys, on the store's client (PING beside it)",
    "valkey": "EVALSHA of 'return 1' with a job's four keys, on the store's client (PING beside it)",
    "postgresql": "SELECT 1 on a connection of the store's pool (bare INSERT: one row, ON CONFLICT DO NOTHING)",
}
#: How the calls per operation are counted.
COUNTED = {
    "round trips": "commands the store's client sent (a script's own calls run on the server)",
    "statements": "statements the store sent, counted at its cursor",
    "transactions": "BEGINs on the store's connections (SQLite is in-process: no round trip)",
}


if __name__ == "__main__":
    sys.exit(main())
