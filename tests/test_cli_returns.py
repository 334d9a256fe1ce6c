"""What ``show`` and ``runs`` say of a handler's return recorded after its run was lost (rule 26):
the run's status with a marker, the attempt's return in the attempts table and a line under it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Tuple

import leasecron
from leasecron import Store
from leasecron.cli.show import run_lines
from leasecron.formatting import utc_time
from leasecron.runs import Run

from .cli_support import parse_table
from .helpers import wait_for
from .test_cli_controls import cli


def interrupted_after_its_handler_returned(store: Store, job: str = "report") -> Tuple[Run, int]:
    """A run whose attempt 1 (web-1) expired and was interrupted by the next slot's run, after its
    handler had returned success (recorded afterwards); the run and when its handler returned."""
    slot = (store.now_ms() // 1000 - 5) * 1000
    first = store.claim(job, slot, runner="web-1", lease_ms=20, max_late_ms=3_600_000).run
    assert first is not None
    wait_for(lambda: store.now_ms() > first.lease_end_ms, message="the lease of attempt 1 did not end")
    assert store.claim(job, slot + 1_000, runner="web-2", max_late_ms=3_600_000).won
    assert store.claim(job, slot, runner="web-2", reason="takeover").outcome == "done"
    returned_ms = first.started_ms + 3
    assert store.record_return(job, slot, 1, "web-1", returned_ms, "success")
    run = store.get_run(job, slot)
    assert run is not None and run.status == "interrupted"
    return run, returned_ms


def test_runs_marks_the_run_and_show_says_when_the_handler_returned(tmp_path: Path) -> None:
    """`runs`: "interrupted (attempt 1 returned success)" and a footnote; the next slot's run, without
    a return, shows its status alone. `show`: the status so, the attempt's "handler returned" cell, a
    line under the table saying when and what the store shows instead; `--json` holds the fields."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with leasecron.open_store(url) as store:
        run, returned_ms = interrupted_after_its_handler_returned(store)
    listed = cli("runs", url)
    assert listed.returncode == 0, listed.stderr
    rows = parse_table(listed.stdout)
    assert [row["status"] for row in rows] == ["running", "interrupted (attempt 1 returned success)"]
    assert "that attempt's handler returned, but the store could not record" in listed.stdout

    shown = cli("show", url, "report", str(run.slot_ms))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert re.search(r"^status\s+interrupted \(attempt 1 returned success\)$", out, re.M), out
    [attempt] = parse_table(out.split("\n\n", 1)[1])
    assert attempt["outcome"] == "expired"
    assert attempt["handler returned"] == f"success at {utc_time(returned_ms, True)[11:]}"
    assert (
        f"attempt 1: handler returned success at {utc_time(returned_ms, True)} UTC"
        " (recorded after the run was lost: the attempt shows expired, the run interrupted)"
    ) in out
    data = json.loads(cli("show", url, "report", str(run.slot_ms), "--json").stdout)
    assert data == run.to_dict()
    assert (data["attempts"][0]["returned_ms"], data["attempts"][0]["returned"]) == (returned_ms, "success")


def test_a_run_without_a_return_shows_no_marker_and_a_failed_return_shows_its_error() -> None:
    """A run without a recorded return: its status alone, "-" in the column, no line. A failed
    handler's return recorded on a running run's current attempt: its error under the line."""
    store = leasecron.MemoryStore()
    claim = store.claim("job", store.now_ms() - 1_000, runner="a", lease_ms=60_000)
    assert claim.run is not None
    plain = run_lines(claim.run, store.now_ms())
    assert not any(line.startswith("attempt 1: handler returned") for line in plain)
    assert "handler returned" not in parse_table("\n".join(plain).split("\n\n", 1)[1])[0]  # no such column
    assert store.record_return("job", claim.run.slot_ms, 1, "a", store.now_ms(), "failed", "KeyError: 'x'\n  at y")
    run = store.get_run("job", claim.run.slot_ms)
    assert run is not None and run.status_text == "running (attempt 1 returned failed)"
    text = "\n".join(run_lines(run, store.now_ms()))
    assert "(recorded while the attempt runs: its end is not recorded yet)" in text
    assert "  its error: KeyError: 'x'\n               at y" in text
