"""Two real chaos workers on a SQLite store: a SIGKILL mid-run of ``long2``, then a SIGTERM.

The test plays the harness: it starts ``python -m chaoslib.worker`` twice
(cwd ``benchmarks/``, ``PYTHONPATH=<repo>:<repo>/benchmarks``), kills the one
that starts a scheduled ``long2`` run, waits for the other to take that run
over, lets the survivor work a little, stops it with SIGTERM, logs both
signals to ``nemesis.jsonl``, and runs the checker on the logs and the
store's final records: no violation, and the lines carry the promised fields.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import leasecron
from chaoslib.checker import Config, check, read_final_runs
from chaoslib.sink import Sink
from tests.helpers import wait_for

from . import BENCHMARKS, ROOT

pytestmark = [pytest.mark.processes, pytest.mark.timeout(60)]

LEASE_MS, HEARTBEAT_MS = 1_000, 200
COMMON = {"ev", "runner", "pid", "wall_ns", "mono_ns"}
IDS = {"job", "slot_ms", "attempt", "token"}
FIELDS = {
    "ready": {"store", "lease_ms", "heartbeat_ms", "max_late_ms", "seed", "jobs"},
    "claim": {"job", "slot_ms", "reason", "outcome", "attempt", "token", "lease_end_ms", "t0_mono_ns", "t1_mono_ns"},
    "heartbeat": IDS | {"ok", "sent_mono_ns", "recv_mono_ns"},
    "finish": IDS | {"ok", "status", "sent_mono_ns", "recv_mono_ns"},
    "release": IDS | {"ok", "sent_mono_ns", "recv_mono_ns"},
    "start": IDS | {"reason", "try_number", "duration_ms", "fails", "grace_ms"},
    "tick": IDS | {"try_number"},
    "abort": IDS | {"reason", "try_number"},
    "sink": IDS | {"accepted", "try_number"},
    "end": IDS | {"outcome", "try_number"},
    "event": {"type", "job", "slot_ms", "attempt", "reason", "error", "token", "try_number"},
    "stopped": {"code"},
}


class Instances:
    """The worker processes of one test, their logs and the nemesis log."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.url = f"sqlite:///{tmp_path / 'store.db'}"
        self.sink = tmp_path / "sink.db"
        Sink(self.sink)  # created before the workers start, as the harness does
        self.procs: Dict[str, "subprocess.Popen[bytes]"] = {}

    def start(self, runner: str) -> "subprocess.Popen[bytes]":
        """Start one worker."""
        cmd = [
            sys.executable, "-m", "chaoslib.worker",
            "--store", self.url, "--runner", runner,
            "--log", str(self.logs / f"{runner}.jsonl"), "--sink", str(self.sink),
            "--lease-ms", str(LEASE_MS), "--heartbeat-ms", str(HEARTBEAT_MS),
            "--max-late-ms", "30000", "--seed", "7",
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{BENCHMARKS}", PYTHONUNBUFFERED="1")
        with open(self.tmp_path / f"{runner}.stderr", "wb") as err:
            proc = subprocess.Popen(
                cmd, cwd=BENCHMARKS, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )
        self.procs[runner] = proc
        return proc

    def signal(self, runner: str, signum: int, action: str) -> None:
        """Send a signal and log it as the harness's nemesis would."""
        proc = self.procs[runner]
        os.kill(proc.pid, signum)
        line = {"ev": "nemesis", "action": action, "runner": runner, "pid": proc.pid,
                "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()}  # fmt: skip
        with open(self.logs / "nemesis.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")

    def lines(self, runner: Optional[str] = None) -> List[Dict[str, Any]]:
        """The complete lines logged so far (of one runner, or of all)."""
        paths = [self.logs / f"{runner}.jsonl"] if runner else sorted(self.logs.glob("*.jsonl"))
        out: List[Dict[str, Any]] = []
        for path in paths:
            if path.exists():
                text = path.read_text()
                out += [json.loads(raw) for raw in text.split("\n")[:-1] if raw]
        return out

    def where(self, ev: str, **fields: Any) -> List[Dict[str, Any]]:
        """The lines of kind ``ev`` whose fields equal ``fields``."""
        return [ln for ln in self.lines() if ln["ev"] == ev and all(ln.get(k) == v for k, v in fields.items())]

    def stderr(self) -> str:
        """Every worker's stderr, for a failure message."""
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.tmp_path.glob("*.stderr")))

    def close(self) -> None:
        """Kill what still runs."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture
def instances(tmp_path: Path) -> Any:
    """Worker processes in ``tmp_path``, killed at teardown."""
    inst = Instances(tmp_path)
    try:
        yield inst
    finally:
        inst.close()


def test_kill_and_term_leave_no_violation(instances: Instances) -> None:
    """SIGKILL of a long2 runner mid-run -> takeover; SIGTERM -> clean exit; the checker finds nothing wrong."""
    for runner in ("w1", "w2"):
        instances.start(runner)
    wait_for(lambda: len(instances.where("running")) == 2, timeout=20, message="workers did not start")
    booted = max(ln["mono_ns"] for ln in instances.where("running"))

    def scheduled_long2() -> Optional[Dict[str, Any]]:
        starts = [s for s in instances.where("start", job="long2", reason="schedule") if s["mono_ns"] > booted]
        return starts[0] if starts else None

    victim = wait_for(scheduled_long2, timeout=10, message="no scheduled long2 run started")
    instances.signal(victim["runner"], signal.SIGKILL, "kill")
    survivor = "w2" if victim["runner"] == "w1" else "w1"
    took_over = wait_for(
        lambda: instances.where("start", job="long2", slot_ms=victim["slot_ms"], attempt=2),
        timeout=10,
        message="the survivor did not take the killed run over",
    )[0]
    assert took_over["runner"] == survivor and took_over["reason"] == "takeover"
    wait_for(lambda: len(instances.where("event", type="success", runner=survivor)) >= 3, timeout=15)
    instances.signal(survivor, signal.SIGTERM, "term")
    assert instances.procs[survivor].wait(20) == 0, instances.stderr()
    assert instances.procs[victim["runner"]].wait(5) == -signal.SIGKILL

    with leasecron.open_store(instances.url) as store:
        final_runs = read_final_runs(store)
    report = check(
        instances.logs, final_runs, Config(lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, sink=instances.sink)
    )
    assert report.ok, report.format_table() + "\n" + instances.stderr()
    assert report.invariants["takeover_delay"].checked >= 1, report.format_table()
    assert report.effects["takeovers"] >= 1 and report.effects["kills"] == 1
    assert_promised_fields(instances, survivor)


def assert_promised_fields(instances: Instances, survivor: str) -> None:
    """Every line has the common fields and those of its kind; each log starts with ready."""
    seen = set()
    for runner in ("w1", "w2"):
        lines = instances.lines(runner)
        assert lines[0]["ev"] == "ready" and lines[0]["pid"] == instances.procs[runner].pid
        for line in lines:
            missing = (COMMON | FIELDS.get(line["ev"], set())) - set(line)
            assert not missing, f"{line['ev']} line lacks {missing}: {line}"
            seen.add(line["ev"])
    assert instances.lines(survivor)[-1]["ev"] == "stopped"
    assert {
        "ready",
        "running",
        "claim",
        "heartbeat",
        "finish",
        "start",
        "tick",
        "sink",
        "end",
        "event",
        "stopped",
    } <= seen
