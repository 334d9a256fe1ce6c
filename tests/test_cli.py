"""The ``leasecron`` command, run as real processes on real SQLite stores."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import List

import pytest

import leasecron
from leasecron.stores import Store

from .conftest import BACKENDS, Backend
from .helpers import wait_for

pytestmark = pytest.mark.processes



def cli(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python -m leasecron ARGS`` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "leasecron", *args],
        capture_output=True, text=True, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def sqlite_url(tmp_path: Path, name: str = "cli.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def make_runs(store: Store) -> List[str]:
    """Runs of job "alpha" (success, failed with a long error, running) and a released one of "beta".

    Returns the three alpha slots as the table prints them (UTC), oldest first.
    """
    base = (store.now_ms() // 60_000 - 5) * 60_000
    kw = dict(max_late_ms=3_600_000, lease_ms=60_000)
    for i, status in enumerate(("success", "failed")):
        run = store.claim("alpha", base + i * 60_000, runner=f"host-{i}", **kw).run
        error = "ValueError: " + "x" * 200 if status == "failed" else None
        assert store.finish("alpha", run.slot_ms, run.token, status, error)
    assert store.claim("alpha", base + 120_000, runner="host-2", **kw).won
    beta = store.claim("beta", base, runner="host-9", **kw).run
    assert store.release("beta", base, beta.token)
    return [_utc(base + i * 60_000) for i in range(3)]


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")


def test_version() -> None:
    """`python -m leasecron --version` prints the package version and exits 0."""
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"leasecron {leasecron.__version__}"


def test_console_script_version() -> None:
    """The installed `leasecron` script answers --version like `python -m leasecron`."""
    script = Path(sys.executable).parent / "leasecron"
    if not script.exists():
        pytest.skip("the leasecron console script is not installed next to this Python")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout.strip()) == (0, f"leasecron {leasecron.__version__}")


def test_runs_table(tmp_path: Path) -> None:
    """`runs URL` prints every job's runs newest first, with lease left, hand-over and a cut error."""
    store = leasecron.open_store(sqlite_url(tmp_path))
    first, second, third = make_runs(store)
    store.close()
    result = cli("runs", sqlite_url(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["job", "slot", "(UTC)", "attempt", "runner", "status", "lease", "left",
                                "handed", "over", "error"]  # fmt: skip
    rows = [line.split() for line in lines[2:6]]
    assert [(r[0], r[2], r[5]) for r in rows] == [
        ("alpha", third, "running"),
        ("alpha", second, "failed"),
        ("alpha", first, "success"),
        ("beta", first, "running"),
    ]
    running = lines[2]
    left = int(re.search(r"running\s+(\d+) ms", running).group(1))
    assert 50_000 < left <= 60_000
    assert "released" in lines[5] and lines[5].split()[-2:] == ["yes", "-"]
    assert "ValueError: xxx" in lines[3] and lines[3].endswith("...") and "x" * 100 not in lines[3]
    assert "4 run(s) of 2 job(s)" in result.stdout


def test_runs_job_limit_and_json(tmp_path: Path) -> None:
    """`runs --job --limit` narrows the table; `--json` prints the runs' to_dict() objects."""
    store = leasecron.open_store(sqlite_url(tmp_path))
    make_runs(store)
    expected = [run.to_dict() for run in store.runs("alpha", limit=2)]
    store.close()
    table = cli("runs", sqlite_url(tmp_path), "--job", "alpha", "--limit", "2")
    assert table.returncode == 0, table.stderr
    assert [line.split()[0] for line in table.stdout.splitlines()[2:4]] == ["alpha", "alpha"]
    assert "beta" not in table.stdout and "2 run(s) of 1 job(s)" in table.stdout
    result = cli("runs", sqlite_url(tmp_path), "--job", "alpha", "--limit", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == expected
    assert [d["status"] for d in data] == ["running", "failed"]


def test_runs_empty_store(tmp_path: Path) -> None:
    """`runs` on a store without runs says so and exits 0; `--json` prints []."""
    assert "No runs" in cli("runs", sqlite_url(tmp_path)).stdout
    assert json.loads(cli("runs", sqlite_url(tmp_path), "--json").stdout) == []


def test_check_sqlite(tmp_path: Path) -> None:
    """`check` on a SQLite URL creates the schema, prints kind, clock offset and round trip, exits 0."""
    url = sqlite_url(tmp_path)
    result = cli("check", url)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^store\s+sqlite\s+SQLiteStore\(", out, re.M)
    assert re.search(r"^clock offset\s+[+-]\d+\.\d ms", out, re.M)
    assert re.search(r"^round trip\s+median \d+\.\d+ ms, max \d+\.\d+ ms", out, re.M)
    assert (tmp_path / "cli.db").exists()
    store = leasecron.open_store(url)
    assert store.jobs() == []  # the schema exists, and the probe left no run behind
    store.close()


SERVER_LINE = {
    "sqlite": r"SQLite 3\.\d+",
    "redis": r"Redis \d+\.\d+",
    "valkey": r"Valkey 9\.\d+",
    "redis-cluster": r"(Redis|Valkey) \d+\.\d+",
    "postgresql": r"PostgreSQL \d+",
}


def test_check_names_the_server(process_backend: Backend) -> None:
    """`check` on every shared store prints the server's kind and version, the clock offset and the round trip."""
    result = cli("check", process_backend.url())
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(rf"^server\s+{SERVER_LINE[process_backend.name]}", out, re.M), out
    assert re.search(r"^clock offset\s+[+-]\d+\.\d ms", out, re.M), out
    assert re.search(r"^round trip\s+median \d+\.\d+ ms, max \d+\.\d+ ms", out, re.M), out
    assert out.rstrip().endswith("ok")


def test_check_errors(tmp_path: Path) -> None:
    """`check` exits 2 for an unknown scheme and 1 for a store it cannot open, with no traceback."""
    unknown = cli("check", "mongodb://x")
    assert unknown.returncode == 2
    assert "unknown store URL scheme 'mongodb'" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = cli("check", f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    assert missing.returncode == 1
    assert "check" in missing.stderr and "Traceback" not in missing.stderr


MODULE = """
import pathlib
import leasecron

HERE = pathlib.Path(__file__).parent
store = leasecron.open_store("sqlite:///" + str(HERE / "run.db"))
cron = leasecron.LeaseCron(store, runner="cli-run", lease_ms=3_000, jitter_ms=0, catch_up_ms=0)
not_a_cron = 42


@cron.job(1, name="tick")
def tick():
    with open(HERE / "ticks.txt", "a") as f:
        f.write("tick\\n")
"""


def test_run_module_until_sigterm(tmp_path: Path) -> None:
    """`run module:attr` runs the module's LeaseCron; a slot runs; SIGTERM stops it with exit 0."""
    (tmp_path / "tickmod.py").write_text(textwrap.dedent(MODULE))
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasecron", "run", "tickmod:cron"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        store = leasecron.open_store(f"sqlite:///{tmp_path / 'run.db'}")
        try:
            run = wait_for(
                lambda: next((r for r in store.runs("tick") if r.status == "success"), None),
                timeout=20, interval=0.1, message="no slot of the job ran",
            )  # fmt: skip
        finally:
            store.close()
        assert run.runner == "cli-run"
        assert "tick" in (tmp_path / "ticks.txt").read_text()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err


def test_run_bad_targets(tmp_path: Path) -> None:
    """`run` exits 2 with a clear message for a non-LeaseCron attribute, a missing module or attribute."""
    (tmp_path / "tickmod.py").write_text(textwrap.dedent(MODULE))
    cases = {
        "tickmod:not_a_cron": "is a int, not a leasecron.LeaseCron",
        "tickmod:nothing": "has no attribute 'nothing'",
        "no_such_module:cron": "no such module",
        "tickmod": "expected module:attr",
    }
    for target, message in cases.items():
        result = cli("run", target, cwd=tmp_path)
        assert result.returncode == 2, (target, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, target


LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3})  (\S+)\s+(\d\d:\d\d:\d\d\.\d{3})?\s+(.*)$")


def demo_lines(out: str) -> List[tuple]:
    """The demo's event lines as (time, who, slot, text)."""
    return [m.groups() for m in map(LINE.match, out.splitlines()) if m]


@pytest.mark.parametrize("store", ["default", "redis", "valkey", "postgresql"])
def test_demo_shows_takeover_handover_and_exactly_once(store: str, tmp_path: Path) -> None:
    """`demo --seconds 14`: a SIGKILLed run is taken over as attempt 2, a SIGTERMed one handed over; exit 0.

    On the embedded SQLite store by default, and with ``--store`` on Redis, Valkey and PostgreSQL.
    """
    args = ["demo", "--seconds", "14"]
    if store != "default":
        backend = BACKENDS[store](tmp_path)
        args += ["--store", backend.url()]
    try:
        result = cli(*args, timeout=40)
    finally:
        if store != "default":
            backend.close()
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    lines = demo_lines(out)
    kill = next(i for i, l in enumerate(lines) if l[1] == "demo" and "=> SIGKILL" in l[3])
    killed_slot = lines[kill][2]
    assert any(l[2] == killed_slot and l[3] == "won attempt 2 (takeover)" for l in lines[kill + 1 :]), out
    term = next(i for i, l in enumerate(lines) if l[1] == "demo" and "=> SIGTERM" in l[3])
    term_slot, victim = lines[term][2], lines[term][3].split()[2]
    after = lines[term + 1 :]
    assert (victim, term_slot, "handed the run over (attempt 1 released)") in [(l[1], l[2], l[3]) for l in after]
    assert any(l[2] == term_slot and l[1] != victim and l[3].startswith("won attempt 2") for l in after), out
    assert re.search(r"^Crash: .* took the slot over as attempt 2 \d+ ms later", out, re.M), out
    handover = r"^Hand-over: .* handed the run over .*; .* ran it as attempt 2 \d+ ms after the SIGTERM"
    assert re.search(handover, out, re.M), out
    assert re.search(r"^OK: every slot ran exactly once: \d+ slots from", out, re.M), out
    assert "Note:" not in out and "FAILED" not in out
    rows = [line.split() for line in out.split("Stored runs")[1].splitlines() if re.match(r"^  \d\d:", line)]
    assert rows and all(row[3] == "success" for row in rows)
    assert [row[0] for row in rows if row[1] == "2"] == [killed_slot, term_slot]


def test_demo_rejects_memory_store() -> None:
    """`demo --store memory://` exits 2: the workers are separate processes."""
    result = cli("demo", "--store", "memory://", "--seconds", "3")
    assert result.returncode == 2 and "memory://" in result.stderr and "Traceback" not in result.stderr
