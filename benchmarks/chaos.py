"""Chaos run: N real instances on one store, a seeded nemesis, and a checker's verdict.

    python benchmarks/chaos.py --store sqlite|redis|valkey|postgresql|redis-sentinel|valkey-sentinel|postgresql-standby
                               [--minutes 3] [--seed N] [--instances 5] [--workdir DIR]
                               [--lease-ms 2000] [--heartbeat-ms 500] [--lease-margin-ms N]

It starts its own store server on 127.0.0.1 (Redis/Valkey with an append-only
file fsynced on every write, a PostgreSQL of its own, or a SQLite file; or, for
``redis-sentinel`` and ``valkey-sentinel``, a primary, two replicas and three
Sentinels, reached through Sentinel with ``replicas=2``; for ``postgresql-standby``,
a primary and a synchronous standby, reached through one multi-host URL), a
fault-injecting proxy per instance (one server), the instances
(``chaoslib.worker``: five jobs every 1, 2 and 3 s, one with a 1 s timeout that it often
runs past, one whose tries fail half the time and are retried twice), and the nemesis: SIGKILL,
SIGSTOP/SIGCONT, SIGTERM hand-overs, store crashes and restarts (SQLite: a
frozen lock holder, a writer killed mid-transaction; a replicated store: failovers
after a ``kill -9`` or a long SIGSTOP of the primary, and a replica cut off; on
PostgreSQL the nemesis promotes the standby, fences a frozen old primary and brings it
back as the standby from a fresh base backup, as a failover tool would), per-instance stalls,
latency and connection resets, and partitions of every instance from the store
(delaying or dropping); and an operator (``chaoslib.controls``) that pauses, resumes
and triggers the jobs through the store at random, reschedules them and puts, replaces
and deletes stored jobs (``chaoslib.schedules``; the instances poll for requests and
schedule changes every 300 ms). The last lease + 5 s stay quiet; then every
instance is stopped with SIGTERM, and the checker (``chaoslib.checker``)
verifies the invariants from the instances' logs and the store's records.

The seed (random unless given) is printed first: the same seed draws the
same faults, durations and gaps, but not the same timing, and which instance
a fault hits depends on which ones run a handler at that moment. The logs stay in the work
directory (a new temporary one unless ``--workdir``), with the store's final
runs in ``final_runs.json``. The exit code is 0 when no invariant was violated
and the faults were effective (takeovers, refused heartbeats, refused late
claims, claims answered paused, manual runs, timeouts, some of them ignored for
a while, retried tries, claims answered stale and runs of stored jobs all
happened); 1 when a violation was found, the run proved nothing, or an instance
exited on its own; 2 when the store's
server binary is missing; 130 on Ctrl-C (everything the run started is
stopped first).

Not yet injected: clock steps (``faketime`` on an instance or the store); every
process here shares the host's clocks.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
from pathlib import Path
from typing import List, Optional

HERE = Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from chaoslib.harness import STORE_KINDS, format_summary, run  # noqa: E402


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python benchmarks/chaos.py", description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, choices=STORE_KINDS)
    p.add_argument("--minutes", type=float, default=3.0, help="length of the run (default: 3)")
    p.add_argument("--seed", type=int, default=None, help="the nemesis's seed (default: random, printed)")
    p.add_argument("--instances", type=int, default=5, help="worker instances (default: 5)")
    p.add_argument("--workdir", type=Path, default=None, help="where the store and logs go (default: a new temp dir)")
    p.add_argument("--lease-ms", type=int, default=2000)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument(
        "--lease-margin-ms",
        type=int,
        default=None,
        help="the instances' lease_margin_ms (default: LeaseCron's, 200 ms for the default lease)",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the summary as JSON to this file")
    return p.parse_args(argv)


def _interrupt() -> None:
    raise KeyboardInterrupt


def main(argv: Optional[List[str]] = None) -> int:
    """Run the chaos test the command line asks for; the exit code."""
    args = parse_args(argv)
    # SIGTERM stops the run like Ctrl-C: everything it started (instances in sessions of their
    # own, servers, proxies) is stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: _interrupt())
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    print(f"seed {seed} (replay: --seed {seed})", flush=True)
    try:
        report, summary = run(
            args.store, args.minutes, seed, instances=args.instances, workdir=args.workdir,
            lease_ms=args.lease_ms, heartbeat_ms=args.heartbeat_ms, lease_margin_ms=args.lease_margin_ms,
            progress=lambda message: print(f"... {message}", flush=True),
        )  # fmt: skip
    except FileNotFoundError as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted (seed {seed}); everything the run started was stopped", file=sys.stderr)
        return 130
    print(report.format_table())
    print(format_summary(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    problems = summary["unexpected_exits"] or summary["unclean_stops"]
    ok = report.ok and report.effective and not problems
    print(f"seed {seed}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
