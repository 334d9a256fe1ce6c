"""Process lifecycle (docs/usage.rst, "Stopping, signals and forks": stop, run_forever, the exit hook, a
fork), in real subprocesses that share a store with the test (SQLite in tmp_path, and every
other store several processes share)."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import List

import pytest

from leasecron import Run, Store
from tests.conftest import Backend
from tests.helpers import wait_for

pytestmark = pytest.mark.processes

PRELUDE = """
import json, os, sys, threading, time
import leasecron
store = leasecron.open_store({url!r})
cron = leasecron.LeaseCron(store, runner={runner}, lease_ms=2_000, heartbeat_ms=200, jitter_ms=0,
                           catch_up_ms=3_660_000, stop_timeout_ms={stop_timeout_ms})
started = threading.Event()

def say(text):  # one write per line: lines of several threads don't interleave
    sys.stdout.write(text + "\\n")
    sys.stdout.flush()

def job(ctx):
    say(f"handler-start {{ctx.attempt}}")
    started.set()  # after the write: a fork never copies a stdout caught mid-write
    if {ignore_signal}:
        time.sleep(30)
    ctx.signal.wait(30)
    say(f"aborted {{ctx.signal.reason}}")
    ctx.signal.raise_if_aborted()

cron.add_job(job, 3600, name="job")
"""


def script(backend: Backend, body: str, runner: str = "'proc'", ignore_signal: bool = False) -> str:
    """The prelude (store, LeaseCron "proc", job "job") followed by ``body``."""
    prelude = PRELUDE.format(url=backend.url(), runner=runner, ignore_signal=ignore_signal, stop_timeout_ms=10_000)
    return prelude + textwrap.dedent(body)


def spawn(code: str, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )


def running_run(store: Store, timeout: float = 10) -> Run:
    """Wait until the store shows a running run of "job"; return it."""
    return wait_for(lambda: next((r for r in store.unfinished("job")), None), timeout)


def handler_started(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Wait until the process prints that its handler started (the store may show a claim earlier:
    a stop() between the claim and the handler's start hands the run over without running it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            line = proc.stdout.readline()
            if line.startswith("handler-start"):
                return
            if not line:
                break
    pytest.fail(f"the handler did not start within {timeout} s (exit code {proc.poll()})")


def finish(proc: subprocess.Popen, timeout: float = 15) -> List[str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"process did not exit in {timeout} s; stdout={out!r} stderr={err!r}")
    assert proc.returncode == 0, f"exit {proc.returncode}; stdout={out!r} stderr={err!r}"
    return out.splitlines()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_forever_turns_sigterm_and_sigint_into_stop_with_hand_over(
    process_backend: Backend, tmp_path: Path, signum: int
) -> None:
    """run_forever() turns SIGTERM/SIGINT into stop(): the live run is handed over and the process exits 0."""
    store = process_backend.open()
    proc = spawn(script(process_backend, 'cron.run_forever()\nsay("stopped")\n'), tmp_path)
    try:
        run = running_run(store)
        assert run.runner == "proc" and not run.handed_over
        handler_started(proc)
        proc.send_signal(signum)
        lines = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "aborted stop" in lines and lines[-1] == "stopped", lines
    after = store.get_run("job", run.slot_ms)
    assert after is not None
    assert (after.status, after.handed_over, after.token) == ("running", True, run.token)
    assert after.lease_end_ms <= store.now_ms()


def test_second_signal_while_stopping_stops_at_once(process_backend: Backend, tmp_path: Path) -> None:
    """A second signal while run_forever() stops does not wait for the stop timeout: the run is abandoned."""
    store = process_backend.open()
    code = script(process_backend, 'cron.run_forever()\nsay("stopped")\n', ignore_signal=True)
    proc = spawn(code, tmp_path)
    try:
        run = running_run(store)
        handler_started(proc)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # the first signal is being handled: stop() waits for the handler
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        lines = finish(proc, timeout=8)
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert lines[-1] == "stopped"
    after = store.get_run("job", run.slot_ms)
    assert after is not None and (after.status, after.handed_over) == ("running", False)


def test_exit_hook_hands_over_when_main_returns_without_stop(process_backend: Backend, tmp_path: Path) -> None:
    """The exit hook hands a live run over when a script returns from main without calling stop()."""
    store = process_backend.open()
    body = """
    def main():
        cron.start()
        assert started.wait(10)
        say("returning")

    main()
    """
    proc = spawn(script(process_backend, body), tmp_path)
    try:
        lines = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "returning" in lines and "aborted stop" in lines, lines
    (run,) = store.runs("job")
    assert (run.status, run.handed_over, run.runner) == ("running", True, "proc")


def test_forked_child_holds_no_threads_or_leases_and_can_start(process_backend: Backend, tmp_path: Path) -> None:
    """After os.fork() the child's copy holds no threads and no leases, and start() runs jobs under the child's pid."""
    store = process_backend.open()
    body = """
    import socket
    PARENT = os.getpid()
    child_ran = threading.Event()
    child_runner = []

    def child_job(ctx):
        child_runner.append(ctx.runner)
        child_ran.set()

    cron.add_job(lambda ctx: (job(ctx) if os.getpid() == PARENT else child_job(ctx)), 3600, name="forked")
    cron.start()
    assert started.wait(10)  # the parent runs a job: it holds a live lease
    pid = os.fork()
    if pid == 0:
        report = {
            "running": cron.running,
            "live": len(cron.live_runs()),
            "threads": threading.active_count(),
            "runner": cron.runner,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        cron.start()
        report["ran"] = child_ran.wait(10)
        report["ctx_runner"] = child_runner[:1]
        cron.stop(timeout=2)
        say(json.dumps(report))
        os._exit(0)
    parent_live = len(cron.live_runs())
    cron.stop(timeout=5)  # hands the parent's run over: the child takes it over
    _, status = os.waitpid(pid, 0)
    say(json.dumps({"parent_live": parent_live, "parent_pid": PARENT, "child_status": status}))
    """
    code = script(process_backend, body, runner="None")
    proc = spawn(code.replace('cron.add_job(job, 3600, name="job")', ""), tmp_path)
    try:
        lines = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    reports = [json.loads(line) for line in lines if line.startswith("{")]
    child = next(r for r in reports if "running" in r)
    parent = next(r for r in reports if "parent_live" in r)
    assert parent["parent_live"] == 1 and parent["child_status"] == 0
    assert child["running"] is False and child["live"] == 0 and child["threads"] == 1
    assert child["pid"] != parent["parent_pid"]
    assert child["runner"] == f"{child['host']}-{child['pid']}"
    assert child["ran"] is True and child["ctx_runner"] == [child["runner"]]
    (run,) = store.runs("forked")
    assert run.runner == child["runner"] and run.attempt == 2 and run.handed_over


def test_a_signal_during_start_stops_run_forever_cleanly(tmp_path: Path) -> None:
    """SIGTERM delivered while run_forever() is still starting (here: as start() logs "starting
    runner") is a stop like any other: the process stops and exits 0, not killed by the signal's
    default action (run_forever installs its handler before it starts)."""
    code = textwrap.dedent(
        """
        import logging, os, signal
        from leasecron import LeaseCron

        class SignalAtStart(logging.Handler):
            def emit(self, record):
                if "starting runner" in record.getMessage():
                    os.kill(os.getpid(), signal.SIGTERM)

        logging.getLogger("leasecron").addHandler(SignalAtStart())
        logging.getLogger("leasecron").setLevel(logging.INFO)
        cron = LeaseCron("memory://", runner="r")
        cron.add_job(lambda: None, 3600, name="job")
        cron.run_forever()
        print("stopped cleanly", cron.running)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped cleanly False"
