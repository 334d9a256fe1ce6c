"""Smoke test of ``benchmarks/dashboard.py``: one small real run (120 jobs of 3 runs, on a fresh
SQLite file), as a user runs it. It checks what the script promises: the store is filled as asked,
every page was answered (the script exits non-zero on any other status), and each row of the table
shows a positive time and its ratio to the store reads measured in the same run. No timing is
asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dashboard.py"
ROWS = (
    "store reads of a jobs page (baseline)",
    "the same with runs() per job (50 calls)",
    "GET / (page 1 of jobs)",
    "GET /?page=1 (the middle page)",
    "GET /?q=job-0999 (a search)",
    "GET /api/jobs",
    "GET /jobs/job-00000 (3 runs)",
    "GET a run's page",
)


def test_dashboard_benchmark_runs_every_page() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "120", "--runs", "3", "--repeat", "2"],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "120 jobs x 3 runs" in done.stdout
    table = {}
    for line in done.stdout.splitlines():
        found = re.match(r"^(.*?)\s+(\d+\.\d)\s+(\d+\.\d\d)$", line)
        if found:
            table[found[1]] = (float(found[2]), float(found[3]))
    assert list(table) == list(ROWS), done.stdout
    reads_ms = table[ROWS[0]][0]
    assert table[ROWS[0]][1] == 1.00
    for what, (ms, ratio) in table.items():
        assert ms > 0, what
        assert ratio == pytest.approx(ms / reads_ms, rel=0.1, abs=0.02), what  # ms are printed to 0.1
