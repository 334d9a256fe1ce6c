"""Smoke tests of issue 28's measurements, run as a user runs them, small: ``benchmarks/stored_scale.py``
(N stored jobs: puts, an instance's start, its memory, the poll after a change) on SQLite, Redis
and PostgreSQL, and ``benchmarks/burst.py --stored`` (stored jobs due at once on 3 instances).

They check what the scripts promise: every figure is printed, the instance planned a slot of every
stored job, each stored job's slot ran exactly once, and nothing is left behind (the temporary
directory, the Redis keys, the PostgreSQL schemas). No timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest
import redis

from tests.benchmarks.test_speed import PollRuns  # its url(kind): sqlite, or the session's server

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
JOBS = 300


def run(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """``script`` with ``args``, its temporary files under ``tmp_path/tmp`` (which it must leave empty)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          env=env, timeout=170)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert list(tmp.iterdir()) == [], "the temporary directory was not removed"
    return proc


def assert_gone(kind: str, url: str, names: list) -> None:
    """No key under any of the prefixes ``names`` (Redis), no schema of those names (PostgreSQL)."""
    for name in names:
        if kind == "redis":
            client = redis.Redis.from_url(url)
            assert list(client.scan_iter(match=f"{name}:*")) == [], f"keys left under {name}"
            client.close()
        elif kind == "postgresql":
            conn = psycopg2.connect(url)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT to_regnamespace(%s) IS NULL", (name,))
                    assert cur.fetchone()[0], f"schema {name} left behind"
            finally:
                conn.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis", "postgresql"])
def test_stored_scale_prints_every_figure_and_leaves_nothing_behind(kind: str, tmp_path: Path) -> None:
    """stored_scale.py --jobs 300: both put paths, the baseline's and the instance's start (every
    stored job's slot planned: the heap holds at least 300 entries), memory per job, the polls
    (each checked by the script: one change, then none), the targets; and its stores removed."""
    url = PollRuns.url(kind)
    proc = run(tmp_path, "stored_scale.py", "--store", url, "--jobs", str(JOBS), "--put-job", "30",
               "--poll-rounds", "5")  # fmt: skip
    out = proc.stdout
    assert re.search(r"puts: put_job 30 jobs in [\d.]+ s .*set_schedule from \d+ thread\(s\) 270 jobs", out), out
    base = re.search(r"^\s+0 \(base\)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", out, re.M)
    row = re.search(rf"^\s+{JOBS}\s+([\d.]+ +){{4}}[\d.]+\s+-?[\d.]+\s+(-?[\d.]+)\s+[\d.]+\s+(\d+)$", out, re.M)
    assert base and row, out
    assert int(row.group(3)) >= JOBS, out  # a timer per stored job's next slot
    states = re.findall(r"poll p50 over 5 rounds, ([\w ]+): after one change [\d.]+ us, no change [\d.]+ us", out)
    assert states == (["as stored", "after VACUUM ANALYZE"] if kind == "postgresql" else ["as stored"]), out
    assert re.search(rf"target: {JOBS} stored jobs scheduled < 10 s after start\(\): (met|MISSED)", out), out
    if kind != "sqlite":
        names = re.findall(r"(?:key prefix|schema) (leasecron_stored_scale(?:_base)?_\d+)", out)
        assert len(set(names)) == 2, out
        assert_gone(kind, url, sorted(set(names)))


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_burst_stored_runs_each_stored_jobs_slot_once(kind: str, tmp_path: Path) -> None:
    """burst.py --stored --jobs 100: the jobs are stored by the script, each of the 100 slots (and
    the warm-up's) ran exactly once on the 3 instances, as the store recorded it; on Redis no key
    is left under the run's prefix (the jobs' schedules and the changelog included)."""
    out = tmp_path / "burst.json"
    extra = ["--redis-url", PollRuns.url(kind)] if kind == "redis" else []
    proc = run(tmp_path, "burst.py", "--stored", "--jobs", "100", "--store", kind, "--json", str(out), *extra)
    document = json.loads(out.read_text())
    assert document["stored"] is True and (document["jobs"], document["instances"]) == (100, 3)
    [fig] = document["stores"]
    assert "error" not in fig and fig["stored"]["put_s"] > 0, fig
    once = fig["every_slot_once"]
    assert (once["due"], once["once"], once["none"], once["more"]) == (100, 100, 0, 0), once
    assert once["store_records"] == {"success at attempt 1": 100} and once["met"], once
    assert fig["warmup"]["once"] == fig["warmup"]["due"] == 100, fig["warmup"]
    assert re.search(r"the 100 jobs are stored jobs of task 'burst'", proc.stdout), proc.stdout
    if kind == "redis":
        prefix = re.search(r"prefix (leasecron_burst_\d+)", fig["where"])
        assert prefix, fig["where"]
        assert_gone(kind, PollRuns.url(kind), [prefix.group(1)])
