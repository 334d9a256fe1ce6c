"""Smoke test of ``benchmarks/sqlite_history.py``: a small real run prints a row per history size
with its figures and ratios, and leaves no temporary directory behind. No timing is asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sqlite_history.py"


def test_prints_a_row_per_history_size_and_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "5,40", "--claims", "30", "--rounds", "2"],
        capture_output=True, text=True, env=env, timeout=100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"bare round trip \(BEGIN IMMEDIATE \+ INSERT \+ COMMIT\): \d+\.\d us", proc.stdout)
    rows = {}
    for line in proc.stdout.splitlines():
        cells = line.split()
        if len(cells) == 5 and cells[0].replace(",", "").isdigit():
            rows[int(cells[0].replace(",", ""))] = [float(c) for c in cells[1:]]
    assert sorted(rows) == [5, 40], proc.stdout
    for p50, p99, x_bare, x_first in rows.values():
        assert 0 < p50 <= p99 and x_bare > 0 and x_first > 0
    assert rows[5][3] == 1.0  # the first size is its own baseline
    assert list(tmp_path.iterdir()) == [], "the temporary directory was not removed"


def test_bad_sizes_are_refused_with_a_message() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "10,x"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--sizes must be integers" in proc.stderr
