"""Smoke test of ``benchmarks/peers.py``: one real run with 3 slots, on SQLite and on PostgreSQL.

The script runs as a user runs it (its own 12 processes, the session's
PostgreSQL); the test reads its ``--json`` figures and its printed table and
checks what the script promises: leasecron ran every slot exactly once on
both stores, APScheduler's rows are there and add up, the table shows the
figures the JSON holds, and nothing is left behind (temporary directory,
PostgreSQL schema). No timing is asserted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import psycopg2
import pytest

from tests.conftest import SERVERS, unavailable

pytestmark = [pytest.mark.processes, pytest.mark.timeout(150)]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py"
SLOTS = 3
SYSTEMS = ("leasecron, SQLite", "APScheduler, SQLite", "leasecron, PostgreSQL", "APScheduler, PostgreSQL")


def _table_rows(stdout: str) -> Dict[str, list]:
    """The printed table's rows: system -> its cells (split on runs of two or more spaces)."""
    rows = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition("  ")
        if name in SYSTEMS:
            rows[name] = re.split(r"\s{2,}", rest.strip())
    return rows


def test_peers_runs_leasecron_once_per_slot_beside_apscheduler(tmp_path: Path) -> None:
    """peers.py --slots 3: leasecron 1 run per slot on SQLite and PostgreSQL, APScheduler's rows
    consistent, the table matches the JSON, and the schema and temporary directory are gone."""
    try:
        import apscheduler  # noqa: F401 - the script's peer, a benchmark-only dependency
        import sqlalchemy  # noqa: F401
    except ImportError as exc:
        unavailable(f"peers.py needs APScheduler 3 and SQLAlchemy ({exc}): pip install 'leasecron[peers]'")
    host, port, dbname = SERVERS.postgres()
    dsn = f"postgresql://{host}:{port}/{dbname}"
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--slots", str(SLOTS), "--pg", dsn, "--json", str(out)],
        capture_output=True, text=True, timeout=130,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    figures: Dict[str, Any] = json.loads(out.read_text())
    rows = {row["system"]: row for row in figures["systems"]}
    assert list(rows) == list(SYSTEMS), done.stdout
    for store in ("SQLite", "PostgreSQL"):
        ours, peer = rows[f"leasecron, {store}"], rows[f"APScheduler, {store}"]
        assert ours["slots_with"] == {"0": 0, "1": SLOTS, "2": 0, "3+": 0}, done.stdout
        assert ours["runs"] == SLOTS and ours["mean_runs"] == 1.0
        assert ours["vs_leasecron"] == {"runs_per_slot": 1.0, "lag_p50": 1.0}
        assert peer["slots"] == SLOTS and sum(peer["slots_with"].values()) == SLOTS
        assert peer["runs"] == sum(peer["runs_per_process"].values())
        assert len(peer["runs_per_process"]) == 3 and len(ours["runs_per_process"]) == 3
        assert peer["vs_leasecron"]["runs_per_slot"] == pytest.approx(peer["runs"] / SLOTS)
    printed = _table_rows(done.stdout)
    assert set(printed) == set(SYSTEMS), done.stdout
    for name, row in rows.items():
        slots_with = [str(row["slots_with"][k]) for k in ("0", "1", "2", "3+")]
        expected = [str(row["slots"]), *slots_with, f"{row['mean_runs']:.2f}", str(row["runs"])]
        assert printed[name][: len(expected)] == expected, done.stdout
        assert printed[name][-3] == f"{row['vs_leasecron']['runs_per_slot']:.2f}x", done.stdout
    assert figures["versions"]["APScheduler"].startswith("3.")
    assert figures["versions"]["PostgreSQL"].startswith("PostgreSQL")
    # clean-up: the temporary directory (the SQLite file) and the schema (APScheduler's PostgreSQL table in it)
    made = figures["made"]
    assert made["pg_schema_owned"] is True
    assert not Path(made["tmp"]).exists()
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regnamespace(%s) IS NULL", (made["pg_schema"],))
            assert cur.fetchone()[0], f"schema {made['pg_schema']} left behind"
    finally:
        conn.close()
