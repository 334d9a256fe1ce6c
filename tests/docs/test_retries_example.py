"""examples/retries.py, which docs/usage.rst shows, run as it is on a SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import leasecron
from tests.docs.readme_examples import ROOT

EXAMPLE = ROOT / "examples" / "retries.py"


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_the_flaky_job_succeeds_on_its_second_try_and_the_stuck_one_times_out(tmp_path: Path) -> None:
    """sync_invoices fails once and succeeds on try 2 in the same attempt (the same lease, no backup);
    export never ends on its own: its 5 s limit aborts its signal, and the run is recorded failed, timed out."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env={**os.environ, "LEASECRON_STORE": url},
        capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert printed == ["export: failed (try 1): timed out after 5000 ms", "sync_invoices: success (try 2)"], (
        result.stdout + result.stderr
    )
    usage = (ROOT / "docs" / "usage.rst").read_text(encoding="utf-8")
    assert all(f"``{line}``" in usage for line in printed), "docs/usage.rst quotes the output"
    assert "ConnectionError: vendor API: connection reset" in result.stderr  # the retried try, logged
    with leasecron.open_store(url, create=False) as store:
        [sync] = store.runs("sync_invoices")
        [export] = store.runs("export")
    assert (sync.status, sync.attempt, len(sync.attempts)) == ("success", 1, 1), sync
    assert (export.status, export.error) == ("failed", "timed out after 5000 ms"), export
