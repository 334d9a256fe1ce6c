"""Smoke test of ``benchmarks/replicas.py``: one small real run on a topology of its own (a primary,
two replicas, three Sentinels of redis-server), as a user runs it. It checks what the script
promises: every operation is measured with ``replicas=0``, 1 and 2, ``replicas=0`` is its own
baseline, and a write waits for its replicas in the same round trip (one round trip per
operation, whatever ``replicas``). No timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import required_binary

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replicas.py"
OPERATIONS = ("claim (won)", "claim (running)", "claim (brief)", "heartbeat", "finish", "release")


def test_replicas_benchmark_measures_each_operation_in_one_round_trip_at_every_replicas_value() -> None:
    """Each row: three (p50, ratio, round trips) cells; the ratio of replicas=0 is 1, and each operation is
    one round trip, whatever replicas."""
    required_binary("redis")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--ops", "20"], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        found = re.match(r"^(.*?)((?:\s+\d+\.\d+){9})$", line)
        if found:
            rows[found.group(1).strip()] = [float(cell) for cell in found.group(2).split()]
    assert set(rows) == set(OPERATIONS), done.stdout
    for name, cells in rows.items():
        p50s, ratios, trips = cells[0::3], cells[1::3], cells[2::3]
        assert all(p50 > 0 for p50 in p50s) and ratios[0] == 1.0 and trips == [1.0, 1.0, 1.0], (name, cells)
