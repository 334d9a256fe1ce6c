"""Real OS processes and the tries of a run: timeouts and retries never let a second runner start.

Two worker processes (:mod:`tests.processes.harness`) share the store of every
process backend; the job runs every :data:`EVERY_S`, and each test follows the
first slot due after both workers were ready. A timed-out handler that ignores
its signal keeps its lease until it returns; a handler retried within its
attempt keeps it through the waits; SIGTERM during a wait hands the run over
and SIGKILL leaves it to a takeover, the backup starting at try 1.
"""

from __future__ import annotations

import signal
from typing import Any, List

import pytest

from leasecron import Run, Store

from .harness import Cluster, Event, first_run

pytestmark = pytest.mark.processes

LEASE_MS = 500
HEARTBEAT_MS = 100
#: Slots far enough apart that the first slot's run and its retries end before the next.
EVERY_S = 2.5
#: For the takeover tests: the backup starts (an interpreter) and takes over before the next slot.
TAKEOVER_EVERY_S = 4.0
NAMES = ["p1", "p2"]
#: Room for process scheduling on a busy host, on top of the protocol's bounds.
MARGIN_MS = 300


def _start(cluster: Cluster, names: List[str] = NAMES, **options: Any) -> None:
    cluster.start_many(names, every=EVERY_S, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, **options)


def _ended(cluster: Cluster, store: Store, slot_ms: int) -> Run:
    """The run of ``slot_ms`` once it ended (its end event came and the store says so)."""
    cluster.wait_event(
        lambda e: e["event"] in ("success", "failed") and e["slot_ms"] == slot_ms, timeout=10, message="(the end)"
    )
    run = store.get_run(cluster.job, slot_ms)
    assert run is not None and run.finished, run
    return run


def _lines(cluster: Cluster, event: str, slot_ms: int) -> List[Event]:
    return cluster.where(event=event, slot_ms=slot_ms)


def test_a_handler_past_its_timeout_keeps_the_lease_and_ends_failed(cluster: Cluster, process_backend: Any) -> None:
    """timeout_ms 400 and a handler that ignores its signal for 1.5 s (three leases): its lease is
    renewed until it returns, the other process never starts the slot (its claim and its backup
    see the run running), and the run ends failed, ``timed out after 400 ms``, reason timeout."""
    _start(cluster, work=1.5, ignore_abort=True, timeout_ms=400)
    first = first_run(cluster, EVERY_S)
    slot, runner = first["slot_ms"], first["runner"]
    run = _ended(cluster, process_backend.open(), slot)

    assert (run.status, run.error, run.attempt, run.runner) == ("failed", "timed out after 400 ms", 1, runner)
    assert [(a.number, a.runner, a.outcome) for a in run.attempts] == [(1, runner, "failed")]
    assert run.finished_ms is not None and run.finished_ms - run.started_ms >= 1_500 > 2 * LEASE_MS
    assert [e["runner"] for e in _lines(cluster, "handler-start", slot)] == [runner]
    assert [e["runner"] for e in _lines(cluster, "start", slot)] == [runner]
    (failed,) = _lines(cluster, "failed", slot)
    (ended,) = _lines(cluster, "handler-end", slot)
    assert (failed["reason"], failed["error"], failed["try_number"]) == ("timeout", "timed out after 400 ms", 1)
    assert ended["t"] <= failed["t"], "the run ended before its handler returned"
    assert not cluster.where(event="lost") and not cluster.where(event="error")


def test_a_handler_failing_twice_succeeds_at_try_3_with_retries_2(cluster: Cluster, process_backend: Any) -> None:
    """retries 2: tries 1 and 2 raise, try 3 returns; two ``retry`` events; one attempt, on one
    process, recorded success."""
    _start(cluster, work=0.05, retries=2, retry_delay_ms=200, fail_tries=2)
    first = first_run(cluster, EVERY_S)
    slot, runner = first["slot_ms"], first["runner"]
    run = _ended(cluster, process_backend.open(), slot)

    assert (run.status, run.attempt, run.runner, run.error) == ("success", 1, runner, None)
    starts = _lines(cluster, "handler-start", slot)
    assert [(e["runner"], e["attempt"], e["try_number"]) for e in starts] == [(runner, 1, n) for n in (1, 2, 3)]
    retries = _lines(cluster, "retry", slot)
    assert [(e["try_number"], e["error"]) for e in retries] == [
        (n, f"RuntimeError: try {n} fails (--fail-tries 2)") for n in (1, 2)
    ]
    # the waits: 200 ms then 400 ms, each with up to a quarter of 200 ms of jitter
    gaps = [b["t"] - a["t"] for a, b in zip(starts, starts[1:])]
    assert 200 <= gaps[0] < 250 + MARGIN_MS and 400 <= gaps[1] < 450 + MARGIN_MS, gaps
    (success,) = _lines(cluster, "success", slot)
    assert success["try_number"] == 3
    assert not cluster.where(event="error")


def test_retries_0_fails_at_the_first_raise_as_before(cluster: Cluster, process_backend: Any) -> None:
    """The default: one try, no ``retry`` event, the run failed with the handler's error."""
    _start(cluster, work=0.05, fail_tries=1)
    first = first_run(cluster, EVERY_S)
    slot = first["slot_ms"]
    run = _ended(cluster, process_backend.open(), slot)
    assert (run.status, run.attempt, run.error) == ("failed", 1, "RuntimeError: try 1 fails (--fail-tries 1)")
    assert len(_lines(cluster, "handler-start", slot)) == 1
    assert not cluster.where(event="retry")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_runner_stopped_in_a_retry_wait_is_taken_over_from_try_1(
    cluster: Cluster, process_backend: Any, signum: int
) -> None:
    """A try raised and the runner waits 30 s for the next: SIGTERM hands the run over at once
    (attempt 1 handed_over), SIGKILL leaves it to expire (attempt 1 expired); either way the other
    process, started while the run waited (it backs up the unfinished run), runs attempt 2 from
    try 1, and succeeds."""
    failing = cluster.start("p1", every=TAKEOVER_EVERY_S, work=0.05, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS,
                            retries=2, retry_delay_ms=30_000, fail_tries=1)  # fmt: skip
    retry = cluster.wait_event(
        lambda e: e["event"] == "retry" and e["runner"] == "p1", timeout=TAKEOVER_EVERY_S + 10, message="(p1's retry)"
    )
    slot = retry["slot_ms"]
    cluster.start("p2", every=TAKEOVER_EVERY_S, work=0.05, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS,
                  retries=2, retry_delay_ms=30_000)  # fmt: skip
    cluster.wait_for(event="ready", runner="p2", timeout=10)
    store = process_backend.open()
    assert store.now_ms() < slot + TAKEOVER_EVERY_S * 1000 - 1_500, "too late for the takeover before the next slot"
    failing.send(signum)
    if signum == signal.SIGTERM:
        cluster.wait_for(event="handover", slot_ms=slot, runner="p1", timeout=5)
        failing.assert_clean_exit(10)
    else:
        assert failing.wait_exit(5) == -signal.SIGKILL
    run = _ended(cluster, store, slot)

    assert (run.status, run.attempt, run.runner) == ("success", 2, "p2"), run
    outcome = "handed_over" if signum == signal.SIGTERM else "expired"
    assert [(a.number, a.runner, a.outcome) for a in run.attempts] == [(1, "p1", outcome), (2, "p2", "success")]
    starts = _lines(cluster, "handler-start", slot)
    assert [(e["runner"], e["attempt"], e["try_number"]) for e in starts] == [("p1", 1, 1), ("p2", 2, 1)]
    took_over = run.attempts[1].started_ms - run.attempts[0].ended_ms
    assert 0 <= took_over <= 2 * HEARTBEAT_MS + MARGIN_MS, took_over
