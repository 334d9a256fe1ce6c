"""The README's quickstart, run as it is: two processes on one SQLite file, stopped with SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import leasecron
from tests.docs.readme_examples import ROOT
from tests.helpers import wait_for

QUICKSTART = ROOT / "examples" / "quickstart.py"


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_quickstart_runs_each_slot_once_across_two_processes_and_stops_on_sigterm(tmp_path: Path) -> None:
    """Each 2 s slot of ``report`` runs once across two quickstart processes; SIGTERM stops both cleanly
    (exit 0: ``run_forever()`` turned the signal into ``stop()``)."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    env = {**os.environ, "LEASECRON_STORE": url, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(QUICKSTART)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    try:
        with leasecron.open_store(url) as store:
            wait_for(
                lambda: sum(run.status == "success" for run in store.runs("report")) >= 3,
                timeout=30,
                message="3 successful slots of the quickstart's report job",
            )
            runs = store.runs("report")
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            out, _ = proc.communicate(timeout=20)
            outputs.append(out)
            assert proc.returncode == 0, out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    rows = Counter(re.findall(r"report of slot (\S+ \S+)$", "".join(outputs), re.M))
    finished = [run for run in runs if run.status == "success"]
    assert len(finished) >= 3
    for run in finished:
        assert rows[str(run.slot)] == 1, (run, rows)  # the handler ran once for the slot, in one process
    assert all(count == 1 for count in rows.values()), rows
