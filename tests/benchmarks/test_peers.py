"""Smoke test of ``benchmarks/peers.py``: one real run with 3 slots and 2-s leases, every system.

The script runs as a user runs it (its own processes, the session's
PostgreSQL and Redis, the peers' environments in the cache directory, made
there on first use: see ``benchmarks/peerslib/venvs.py``); the test reads its
``--json`` figures and its printed tables and checks what the script
promises: leasecron ran every slot exactly once on both stores, the
APScheduler 3 and 4 rows are there and add up, the table shows the figures
the JSON holds; in the recovery table every system has its row, leasecron
took over the killed run and celery beat + RedBeat sent the next beat from a
standby (each a positive time), APScheduler 4 either ran again or says it
did not within the deadline; and nothing is left behind (temporary
directory, PostgreSQL schemas, Redis keys, processes). No timing is asserted.
An environment that cannot be made (no package index) skips, and fails in CI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import psycopg2
import pytest
import redis

from tests.conftest import SERVERS, unavailable

pytestmark = [pytest.mark.processes, pytest.mark.timeout(420)]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py"
SLOTS = 3
#: Short leases and deadline: the recovery run takes seconds, not minutes.
LEASE_S, DEADLINE_S = 2, 8
SYSTEMS = (
    "leasecron, SQLite", "APScheduler 3, SQLite", "APScheduler 4, SQLite",
    "leasecron, PostgreSQL", "APScheduler 3, PostgreSQL", "APScheduler 4, PostgreSQL",
)  # fmt: skip
RECOVERY = (
    "leasecron, Redis", "celery beat + RedBeat, Redis", "leasecron, PostgreSQL", "APScheduler 4, PostgreSQL",
    "leasecron, SQLite", "APScheduler 4, SQLite",
)  # fmt: skip


def _rows(lines: List[str], names: tuple) -> Dict[str, list]:
    """A printed table's rows: system -> its cells (split on runs of two or more spaces)."""
    rows = {}
    for line in lines:
        name, _, rest = line.partition("  ")
        if name in names:
            rows[name] = re.split(r"\s{2,}", rest.strip())
    return rows


def _leftover_processes(marks: List[str]) -> List[str]:
    """Command lines of running processes that name any of ``marks``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(re.search(re.escape(mark) + r"(?!\d)", cmdline) for mark in marks):
            found.append(f"{pid}: {cmdline[:200]}")
    return found


def test_peers_table_and_recovery(tmp_path: Path) -> None:
    """peers.py --slots 3 --lease 2: leasecron once per slot beside APScheduler 3 and 4 on SQLite and
    PostgreSQL; recovery rows for every system; the tables match the JSON; nothing left behind."""
    try:
        import apscheduler  # noqa: F401 - the script's peer, a benchmark-only dependency
        import sqlalchemy  # noqa: F401
    except ImportError as exc:
        unavailable(f"peers.py needs APScheduler 3 and SQLAlchemy ({exc}): pip install 'leasecron[bench-peers]'")
    host, port, dbname = SERVERS.postgres()
    dsn = f"postgresql://{host}:{port}/{dbname}"
    redis_host, redis_port = SERVERS.redis()
    redis_url = f"redis://{redis_host}:{redis_port}/0"
    out = tmp_path / "peers.json"
    argv = [sys.executable, str(SCRIPT), "--slots", str(SLOTS), "--pg", dsn, "--redis", redis_url,
            "--lease", str(LEASE_S), "--recovery-deadline", str(DEADLINE_S), "--json", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=400)
    said = f"stdout:\n{stdout}\nstderr:\n{stderr}"
    assert proc.returncode == 0, said
    figures: Dict[str, Any] = json.loads(out.read_text())
    made = figures["made"]
    unmade = {what: why for what, why in made["left_out"].items() if "environment could not be made" in why}
    if unmade:
        unavailable(f"peers.py could not make its peers' environments: {unmade}")
    assert made["left_out"] == {}, said
    # the table
    rows = {row["system"]: row for row in figures["systems"]}
    assert list(rows) == list(SYSTEMS), said
    for store in ("SQLite", "PostgreSQL"):
        ours = rows[f"leasecron, {store}"]
        assert ours["slots_with"] == {"0": 0, "1": SLOTS, "2": 0, "3+": 0}, said
        assert ours["runs"] == SLOTS and ours["mean_runs"] == 1.0
        assert ours["vs_leasecron"] == {"runs_per_slot": 1.0, "lag_p50": 1.0}
        assert len(ours["runs_per_process"]) == 3
        for version in (3, 4):
            peer = rows[f"APScheduler {version}, {store}"]
            assert peer["slots"] == SLOTS and sum(peer["slots_with"].values()) == SLOTS
            assert peer["runs"] == sum(peer["runs_per_process"].values())
            assert len(peer["runs_per_process"]) == 3
            assert peer["vs_leasecron"]["runs_per_slot"] == pytest.approx(peer["runs"] / SLOTS)
    lines = stdout.splitlines()
    split = next(i for i, line in enumerate(lines) if line.startswith("recovery after a SIGKILL"))
    printed = _rows(lines[:split], SYSTEMS)
    assert set(printed) == set(SYSTEMS), said
    for name, row in rows.items():
        slots_with = [str(row["slots_with"][k]) for k in ("0", "1", "2", "3+")]
        expected = [str(row["slots"]), *slots_with, f"{row['mean_runs']:.2f}", str(row["runs"])]
        assert printed[name][: len(expected)] == expected, said
        assert printed[name][-3] == f"{row['vs_leasecron']['runs_per_slot']:.2f}x", said
    versions = figures["versions"]
    assert versions["APScheduler"].startswith("3.") and versions["APScheduler 4"]["APScheduler"].startswith("4.")
    assert versions["celery beat + RedBeat"]["celery-redbeat"] and versions["PostgreSQL"].startswith("PostgreSQL")
    # the recovery table
    recovered = {row["system"]: row for row in figures["recovery"]["systems"]}
    assert list(recovered) == list(RECOVERY), said
    printed = _rows(lines[split:], RECOVERY)
    assert set(printed) == set(RECOVERY), said
    for name, row in recovered.items():
        assert row["killed"] is not None and row["deadline_s"] == DEADLINE_S
        if name.startswith("APScheduler 4") and row["recovered_s"] is None:
            assert row["what"] == f"no takeover within {DEADLINE_S} s" and row["by"] is None, said
            assert printed[name][-1].startswith(">"), said
            continue
        assert row["recovered_s"] > 0 and row["by"] not in (None, row["killed"]), said
        assert printed[name][-3] == f"{row['recovered_s']:.2f} s", said
        if row["scheduler"] == "leasecron":
            assert row["what"] == "the killed run, taken over (attempt 2)" and row["vs_leasecron"] == 1.0, said
            assert row["lease"] == f"lease_ms {LEASE_S * 1000}, heartbeat_ms {LEASE_S * 1000 // 6}", said
    assert recovered["celery beat + RedBeat, Redis"]["what"] == "the next beat, sent by a standby", said
    # clean-up: the temporary directory, the schemas, the Redis keys, the processes
    assert made["pg_schema_owned"] is True
    assert not Path(made["tmp"]).exists()
    schemas = [made["pg_schema"], *made["aps4_schemas"], *made["recovery"]["pg_schemas"]]
    assert len(schemas) == 4, made
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            for schema in schemas:
                cur.execute("SELECT to_regnamespace(%s) IS NULL", (schema,))
                assert cur.fetchone()[0], f"schema {schema} left behind"
    finally:
        conn.close()
    client = redis.Redis(host=redis_host, port=redis_port)
    try:
        for prefix in made["recovery"]["redis_prefixes"]:
            assert not list(client.scan_iter(match=f"*{prefix}*", count=1000)), f"Redis keys of {prefix} left behind"
    finally:
        client.close()
    run = f"leasecron_peers_{proc.pid}"
    assert not _leftover_processes([made["tmp"], run, f"leasecron_peersrec_{proc.pid}"])
