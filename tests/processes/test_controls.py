"""Real OS processes and the operators' controls: trigger, pause and resume from the CLI, attempts.

Three worker processes (:mod:`tests.processes.harness`) share a SQLite file or
a Redis key prefix; the operator is another process, the ``leasecron``
command, run as a subprocess the way an operator runs it. Each test checks
what the workers printed and what the store recorded, on the store's clock.

The workers are :mod:`leasecron.cli.worker` with ``--poll-ms`` :data:`POLL_MS`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any, Callable, List, Optional

import pytest

from leasecron import Run, Store
from tests.helpers import wait_for

from .harness import Cluster, Worker, first_run, renewed_run

pytestmark = [
    pytest.mark.processes,
    pytest.mark.parametrize("process_backend", ["sqlite", "redis"], indirect=True),
]

#: How often each worker polls for requests of manual runs.
POLL_MS = 200
LEASE_MS = 500
HEARTBEAT_MS = 100
#: Room for process scheduling on a busy host, on top of the protocol's bounds (docs/protocol.rst).
MARGIN_MS = 300
NAMES = ["p1", "p2", "p3"]


def _cli(*args: str, expect: int = 0) -> str:
    """Run ``python -m leasecron ARGS`` as an operator would; its stdout. Fails unless it exits ``expect``."""
    done = subprocess.run(
        [sys.executable, "-m", "leasecron", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    assert done.returncode == expect, f"leasecron {args[0]} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _cli_json(*args: str) -> Any:
    return json.loads(_cli(*args, "--json"))




def _slot_after(ms: int, every_ms: int) -> int:
    """The first slot of an interval schedule of ``every_ms`` strictly after ``ms``."""
    return (ms // every_ms + 1) * every_ms




def _kill_and_take_over(cluster: Cluster, victim: Worker, slot_ms: int) -> str:
    """SIGKILL ``victim`` mid-run at ``slot_ms``; another worker starts attempt 2 (reason takeover)
    and it succeeds. The taker's runner."""
    victim.kill()
    assert victim.wait_exit(5) == -signal.SIGKILL
    takeover = cluster.wait_event(
        lambda e: e["event"] == "start" and e["slot_ms"] == slot_ms and e["attempt"] == 2,
        timeout=(LEASE_MS + 2 * HEARTBEAT_MS) / 1000 + 5,
        message="(attempt 2 after the kill)",
    )
    taker = str(takeover["runner"])
    assert taker != victim.runner and takeover["reason"] == "takeover"
    cluster.wait_for(event="success", slot_ms=slot_ms, attempt=2, runner=taker, timeout=5)
    return taker


def _all_ended(store: Store, job: str, slots: List[int]) -> Optional[List[Run]]:
    """The runs of ``job`` at ``slots`` once every one of them has ended; None until then."""
    ended = [r for r in (store.get_run(job, slot) for slot in slots) if r is not None and r.finished]
    return ended if len(ended) == len(slots) else None


def test_cli_trigger_runs_once_on_one_process(
    cluster: Cluster, process_backend: Any, record_property: Callable[[str, object], None]
) -> None:
    """`leasecron trigger --wait`: one of three processes runs it once, reason manual, within poll_ms + 1 s."""
    # An hourly job: no scheduled slot falls due during the test (tests/conftest.py keeps it off the hour).
    cluster.start_many(NAMES, every=3600.0, work=0.2, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, poll_ms=POLL_MS)
    store = process_backend.open()
    before = store.now_ms()

    out = _cli_json("trigger", cluster.url, cluster.job, "--wait", "--timeout", "10")
    slot = out["request"]["slot_ms"]
    assert out["result"] == "success", out
    assert before <= slot <= store.now_ms()

    run = store.get_run(cluster.job, slot)
    assert run is not None
    assert (run.status, run.attempt, run.reason) == ("success", 1, "manual"), run
    assert run.runner in NAMES
    assert [(a.number, a.runner, a.reason, a.outcome) for a in run.attempts] == [(1, run.runner, "manual", "success")]
    took_ms = run.attempts[0].started_ms - slot  # both on the store's clock
    record_property("trigger_to_start_ms", took_ms)
    assert 0 <= took_ms <= POLL_MS + 1_000, f"the manual run started {took_ms} ms after the request"

    # What the processes say: one handler ran it, the runner the store names; nobody else started it.
    cluster.wait_for(event="success", slot_ms=slot, runner=run.runner, timeout=5)
    starts = cluster.where(event="handler-start", slot_ms=slot)
    assert [(e["runner"], e["attempt"]) for e in starts] == [(run.runner, 1)], starts
    assert [(e["runner"], e["reason"]) for e in cluster.where(event="start", slot_ms=slot)] == [(run.runner, "manual")]
    assert [e["runner"] for e in cluster.where(event="success", slot_ms=slot)] == [run.runner]
    # The request was consumed by that claim: no process can claim it again on a later poll.
    state = store.job_state(cluster.job)
    assert [(r.slot_ms, r.state) for r in state.requests] == [(slot, "claimed")], state
    assert not state.pending
    assert [r.slot_ms for r in store.runs(cluster.job)] == [slot]
    assert not cluster.where(event="error"), cluster.where(event="error")


def test_cli_pause_stops_every_process_then_resume(cluster: Cluster, process_backend: Any) -> None:
    """`leasecron pause`: runs in flight go on, all three skip the next slot (paused); `resume`: it runs again."""
    # Each run works 1.5 s and runs may overlap: whenever the pause lands, a run is in flight.
    every_ms, work_s = 1_000, 1.5
    cluster.start_many(
        NAMES, every=every_ms / 1000, work=work_s, overlap="allow", lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS
    )
    store = process_backend.open()
    first_run(cluster, every_ms / 1000)

    state = _cli_json("pause", cluster.url, cluster.job, "--note", "x", "--by", "ops")
    assert (state["paused"], state["paused_by"], state["note"]) == (True, "ops", "x"), state
    paused_ms = state["paused_ms"]
    assert store.job_state(cluster.job).paused_ms == paused_ms

    # Each process claims the next slot and is answered "paused": it emits skip, reason paused.
    following = _slot_after(paused_ms, every_ms)
    for name in NAMES:
        cluster.wait_event(
            lambda e, n=name: e["event"] == "skip" and e["runner"] == n and e["slot_ms"] == following,
            timeout=(following - store.now_ms()) / 1000 + 3,
            message=f"(skip of slot {following} by {name})",
        )
    for e in cluster.where(event="skip", slot_ms=following):
        assert e["reason"] == "paused", e

    resume_from = store.now_ms()
    state = _cli_json("resume", cluster.url, cluster.job, "--by", "ops")
    assert (state["paused"], state["paused_ms"], state["note"]) == (False, None, None), state
    resumed_ms = store.now_ms()
    after = _slot_after(resumed_ms, every_ms)
    started = cluster.wait_event(
        lambda e: e["event"] == "handler-start" and e["slot_ms"] == after,
        timeout=(after - resumed_ms) / 1000 + 3,
        message=f"(the run of slot {after}, the first after the resume)",
    )

    # The first slot after the resume runs, as scheduled, on one process.
    run = store.get_run(cluster.job, after)
    assert run is not None and (run.attempt, run.reason, run.runner) == (1, "schedule", started["runner"]), run
    # The runs in flight at the pause go on to success, unaborted.
    in_flight = [
        r.slot_ms
        for r in store.runs(cluster.job, limit=50)
        if r.started_ms <= paused_ms and (r.finished_ms is None or r.finished_ms > paused_ms)
    ]
    assert in_flight, "no run was in flight at the pause"
    ended = wait_for(
        lambda: _all_ended(store, cluster.job, in_flight),
        timeout=work_s + 3,
        message=f"the runs in flight at the pause ({in_flight}) did not end",
    )
    assert [(r.status, r.attempt) for r in ended] == [("success", 1)] * len(in_flight), ended
    assert not cluster.where(event="aborted")
    # No claim decided after the pause and before the resume won a run: no run, no handler, for
    # any slot in between (the skipped slots are not caught up after the resume either).
    runs = store.runs(cluster.job, limit=50)
    assert not [r.slot_ms for r in runs if paused_ms < r.slot_ms <= resume_from]
    assert not [e for e in cluster.where(event="handler-start") if paused_ms < e["slot_ms"] <= resume_from]
    for r in runs:
        if r.slot_ms <= resume_from:
            assert r.attempts[0].started_ms <= paused_ms, f"slot {r.slot_ms} was won after the pause: {r}"
    assert len(cluster.where(event="handler-start", slot_ms=after)) == 1
    assert not cluster.where(event="error"), cluster.where(event="error")


def test_sigkilled_runner_shows_attempts_expired_then_success(
    cluster: Cluster, process_backend: Any, record_property: Callable[[str, object], None]
) -> None:
    """SIGKILL of a runner mid-run: `leasecron show --json` lists attempt 1 expired (killed) and 2 success."""
    every_s = 2.0  # the next slot falls after the takeover and its run (docs/protocol.rst, "Why a newer run wins")
    cluster.start_many(NAMES, every=every_s, work=0.8, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, poll_ms=POLL_MS)
    first = first_run(cluster, every_s)
    slot, victim = first["slot_ms"], cluster.workers[first["runner"]]
    store = process_backend.open()
    renewed_run(store, cluster.job, slot, LEASE_MS)

    taker = _kill_and_take_over(cluster, victim, slot)

    shown = _cli_json("show", cluster.url, cluster.job, str(slot))
    assert (shown["slot_ms"], shown["status"], shown["attempt"], shown["runner"]) == (slot, "success", 2, taker)
    attempts = shown["attempts"]
    assert [(a["number"], a["runner"], a["reason"], a["outcome"]) for a in attempts] == [
        (1, victim.runner, "schedule", "expired"),
        (2, taker, "takeover", "success"),
    ], attempts
    one, two = attempts
    assert one["error"] is None and two["error"] is None
    # Attempt 1 ended at its lease's end (the killed runner renewed it at least once), attempt 2 began
    # after it, within the backups' check interval, and ended when the run did.
    assert slot <= one["started_ms"]
    assert one["started_ms"] + LEASE_MS < one["ended_ms"] <= two["started_ms"], attempts
    gap_ms = two["started_ms"] - one["ended_ms"]
    record_property("lease_end_to_takeover_ms", gap_ms)
    assert gap_ms <= 2 * HEARTBEAT_MS + MARGIN_MS, f"attempt 2 started {gap_ms} ms after attempt 1's lease ended"
    assert two["ended_ms"] == shown["finished_ms"]
    run = store.get_run(cluster.job, slot)
    assert run is not None and run.to_dict() == shown
    # The killed runner never finished its attempt; only the taker's handler ended.
    assert [e["runner"] for e in cluster.where(event="handler-end", slot_ms=slot)] == [taker]
    assert [e["runner"] for e in cluster.where(event="success", slot_ms=slot)] == [taker]



def test_a_triggered_run_whose_runner_is_sigkilled_is_taken_over(
    cluster: Cluster, process_backend: Any, record_property: Callable[[str, object], None]
) -> None:
    """`leasecron trigger`, then SIGKILL of the process that runs it: another takes it over (the
    others back up a manual run like any other) and `show` lists 1 manual expired, 2 takeover success."""
    cluster.start_many(NAMES, every=3600.0, work=2.0, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, poll_ms=POLL_MS)
    slot = int(_cli("trigger", cluster.url, cluster.job).split("slot ")[1].split()[0])
    started = cluster.wait_event(
        lambda e: e["event"] == "handler-start" and e["slot_ms"] == slot, timeout=POLL_MS / 1000 + 5, message="(manual)"
    )
    victim = cluster.workers[started["runner"]]
    taker = _kill_and_take_over(cluster, victim, slot)
    shown = _cli_json("show", cluster.url, cluster.job, str(slot))
    attempts = [(a["number"], a["runner"], a["reason"], a["outcome"]) for a in shown["attempts"]]
    assert attempts == [(1, victim.runner, "manual", "expired"), (2, taker, "takeover", "success")], shown
    one, two = shown["attempts"]
    gap_ms = two["started_ms"] - one["ended_ms"]
    record_property("manual_lease_end_to_takeover_ms", gap_ms)
    assert 0 <= gap_ms <= 2 * HEARTBEAT_MS + MARGIN_MS, f"attempt 2 started {gap_ms} ms after attempt 1's lease ended"
