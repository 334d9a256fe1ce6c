"""Real OS processes share a store: crash takeover, fencing, hand-over on stop, exactly once.

Each test starts ``python -m leasecron.cli.worker`` processes (see
:mod:`tests.processes.harness`), follows the JSON lines they print, acts on
them with signals, and checks both what the processes said and what the
store recorded. Every wait has a deadline; every process is killed in
teardown.

The last test pins down a crash once found: a worker closing its store while
a heartbeat thread was still inside a store call died of SIGSEGV on its way
out; every test now asserts a clean exit.
"""

from __future__ import annotations

import signal
import time
from typing import Any, List, Tuple

import pytest

from leasecron import Run, Store, StoreUnavailable, open_store
from tests.helpers import wait_for

from .harness import (
    Cluster,
    Event,
    Worker,
    first_run,
    ready_t,
    renewed_run,
    store_write_lock,
)

pytestmark = pytest.mark.processes

LEASE_MS = 600
HEARTBEAT_MS = 100
#: Room for process scheduling on a busy host, on top of the protocol's bounds (docs/protocol.rst).
MARGIN_MS = 300
NAMES = ["p1", "p2", "p3"]




def _freeze_between_heartbeats(victim: Worker, store: Store, backend: Any, job: str, slot_ms: int) -> None:
    """SIGSTOP the victim right after a heartbeat was stored, never inside a store write.

    Frozen inside SQLite's write transaction, a process would hold the file's
    write lock and stall every other process (no backup could take over until
    it continues). So the signal goes out as soon as a renewal shows in the
    store (the next heartbeat is a whole interval away) and, on SQLite, a
    write probe with a short busy timeout checks that the lock is free;
    otherwise the victim is continued and the next heartbeat is tried.
    """
    probe = None
    if backend.name == "sqlite":
        probe = open_store(backend.url() + "&busy_timeout_ms=50")
    try:
        for _ in range(10):
            seen = store.get_run(job, slot_ms)
            assert seen is not None and seen.status == "running", seen
            wait_for(
                lambda before=seen.lease_end_ms: getattr(store.get_run(job, slot_ms), "lease_end_ms", before) != before,
                timeout=3,
                interval=0.001,
                message="no heartbeat renewed the lease",
            )
            victim.send(signal.SIGSTOP)
            if probe is None:
                return
            try:  # a write that changes nothing: a release with a token no attempt has
                probe.release(job, slot_ms, "0" * 32)
                return
            except StoreUnavailable:
                victim.send(signal.SIGCONT)
        pytest.fail("could not freeze the runner outside a store write")
    finally:
        if probe is not None:
            probe.close()


def _events(cluster: Cluster, name: str, slot_ms: int, **fields: Any) -> List[Event]:
    return cluster.where(event=name, slot_ms=slot_ms, **fields)


def _others(cluster: Cluster, victim: Worker) -> List[str]:
    return [name for name in cluster.workers if name != victim.runner]


def _first_run(cluster: Cluster, every: float, backend: Any) -> Tuple[Event, int, Worker, Store]:
    """The first run's start event, its slot, the worker running it (the victim), and a store handle."""
    first = first_run(cluster, every)
    return first, first["slot_ms"], cluster.workers[first["runner"]], backend.open()


def _taken_over(cluster: Cluster, victim: Worker, slot: int, timeout: float, when: str) -> Event:
    """The start of attempt 2 of ``slot`` (within ``timeout`` s): a takeover, by another process."""
    takeover = cluster.wait_event(
        lambda e: e["event"] == "start" and e["slot_ms"] == slot and e["attempt"] == 2,
        timeout=timeout,
        message=f"(attempt 2 {when})",
    )
    assert takeover["runner"] in _others(cluster, victim)
    assert takeover["reason"] == "takeover"
    return takeover


def _succeeded_as_attempt_2(cluster: Cluster, store: Store, slot: int, takeover: Event) -> Run:
    """Once the taker reports success: the stored run, a success of attempt 2 by the taker's token."""
    cluster.wait_for(event="success", slot_ms=slot, attempt=2, runner=takeover["runner"], timeout=10)
    run = store.get_run(cluster.job, slot)
    assert run is not None
    assert (run.status, run.attempt, run.runner, run.token) == ("success", 2, takeover["runner"], takeover["token"])
    return run


def test_sigkill_mid_run_backup_takes_over(cluster: Cluster, process_backend: Any) -> None:
    """SIGKILL of a runner mid-run: another process runs attempt 2 within lease_ms + 2 × heartbeat_ms."""
    every = 3.0
    cluster.start_many(NAMES, every=every, work=1.5, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS)
    first, slot, victim, store = _first_run(cluster, every, process_backend)
    renewed_run(store, cluster.job, slot, LEASE_MS)

    killed_at = victim.kill()
    assert victim.wait_exit(5) == -signal.SIGKILL

    takeover = _taken_over(cluster, victim, slot, (LEASE_MS + 2 * HEARTBEAT_MS) / 1000 + 5, "after the kill")
    took_ms = takeover["t"] - killed_at
    assert took_ms <= LEASE_MS + 2 * HEARTBEAT_MS + MARGIN_MS, f"takeover {took_ms} ms after the kill"

    assert _succeeded_as_attempt_2(cluster, store, slot, takeover).reason == "takeover"
    # The victim died mid-run; only the taker ran attempt 2, and the slot succeeded once.
    assert not _events(cluster, "handler-end", slot, runner=victim.runner)
    assert [e["runner"] for e in _events(cluster, "handler-start", slot)] == [victim.runner, takeover["runner"]]
    assert [e["runner"] for e in _events(cluster, "success", slot)] == [takeover["runner"]]


def test_sigstop_past_the_lease_is_fenced(cluster: Cluster, process_backend: Any) -> None:
    """SIGSTOP past the lease, then SIGCONT: a backup ran attempt 2, the frozen runner is lost and fenced."""
    every = 5.0
    cluster.start_many(NAMES, every=every, work=3.0, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, probe_finish=True)
    first, slot, victim, store = _first_run(cluster, every, process_backend)
    _freeze_between_heartbeats(victim, store, process_backend, cluster.job, slot)
    try:
        # Frozen until a backup took over: longer than the lease, by construction.
        timeout = (LEASE_MS + 2 * HEARTBEAT_MS) / 1000 + 5
        takeover = _taken_over(cluster, victim, slot, timeout, "while the runner is frozen")
    finally:
        victim.send(signal.SIGCONT)
    assert takeover["token"] != first["token"]

    aborted = cluster.wait_for(event="aborted", slot_ms=slot, runner=victim.runner, timeout=5)
    assert (aborted["attempt"], aborted["reason"]) == (1, "lost")
    lost = cluster.wait_for(event="lost", slot_ms=slot, runner=victim.runner, timeout=5)
    assert lost["attempt"] == 1 and lost["token"] == first["token"]
    probe = cluster.wait_for(event="probe-finish", slot_ms=slot, runner=victim.runner, timeout=5)
    assert probe["accepted"] is False, "a finish with the fenced token was accepted"
    run = store.get_run(cluster.job, slot)
    assert run is not None and run.token == takeover["token"] and run.attempt == 2

    _succeeded_as_attempt_2(cluster, store, slot, takeover)
    # The frozen runner never finished the slot, by event or by handler.
    assert not _events(cluster, "success", slot, runner=victim.runner)
    assert not _events(cluster, "handler-end", slot, runner=victim.runner)
    assert [e["runner"] for e in _events(cluster, "success", slot)] == [takeover["runner"]]
    assert victim.proc.poll() is None, "the continued runner should keep running"


def test_sigterm_hands_the_run_over(cluster: Cluster, process_backend: Any) -> None:
    """SIGTERM mid-run: the runner aborts ("stop") and hands over; a backup takes over within 2 heartbeats."""
    every = 3.0
    # A long lease: a takeover within 2 heartbeats of the hand-over can only come from the release.
    lease_ms = 3_000
    cluster.start_many(NAMES, every=every, work=1.5, lease_ms=lease_ms, heartbeat_ms=HEARTBEAT_MS)
    first, slot, victim, store = _first_run(cluster, every, process_backend)
    renewed_run(store, cluster.job, slot, lease_ms)

    victim.send(signal.SIGTERM)
    aborted = cluster.wait_for(event="aborted", slot_ms=slot, runner=victim.runner, timeout=5)
    assert (aborted["attempt"], aborted["reason"]) == (1, "stop")
    handover = cluster.wait_for(event="handover", slot_ms=slot, runner=victim.runner, timeout=5)
    assert handover["attempt"] == 1
    takeover = _taken_over(cluster, victim, slot, 5, "after the hand-over")
    took_ms = takeover["t"] - handover["t"]
    assert took_ms <= 2 * HEARTBEAT_MS + MARGIN_MS, f"takeover {took_ms} ms after the hand-over"

    victim.wait_exit(10)
    cluster.wait_for(event="stopped", runner=victim.runner, timeout=5)

    assert _succeeded_as_attempt_2(cluster, store, slot, takeover).handed_over is True
    assert not _events(cluster, "success", slot, runner=victim.runner)
    assert not _events(cluster, "lost", slot)
    victim.assert_clean_exit(10)


def test_every_slot_runs_exactly_once(cluster: Cluster, process_backend: Any) -> None:
    """3 processes × 10 slots with racing claims: every slot ran exactly once, attempt 1, success."""
    every_ms, slots = 1_000, 10
    workers = cluster.start_many(
        NAMES, every=every_ms / 1000, work=0.2, lease_ms=1_000, heartbeat_ms=HEARTBEAT_MS, jitter_ms=200
    )
    ready = ready_t(cluster)
    # The first slot after every worker was ready (with room for a worker's boot to plan it).
    first = ((ready + 100) // every_ms + 1) * every_ms
    wanted = [first + i * every_ms for i in range(slots)]
    last = wanted[-1]
    cluster.wait_event(
        lambda e: e["event"] == "success" and e["slot_ms"] == last,
        timeout=(last - ready) / 1000 + 5,
        message=f"(the success of slot {last})",
    )
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        worker.wait_exit(10)
        cluster.wait_for(event="stopped", runner=worker.runner, timeout=5)

    store = process_backend.open()
    for slot in wanted:
        starts = _events(cluster, "handler-start", slot)
        assert len(starts) == 1, (slot, starts)
        assert starts[0]["attempt"] == 1
        successes = _events(cluster, "success", slot)
        assert len(successes) == 1, (slot, successes)
        assert successes[0]["runner"] == starts[0]["runner"]
        assert not _events(cluster, "failed", slot) and not _events(cluster, "lost", slot)
        run = store.get_run(cluster.job, slot)
        assert run is not None, slot
        assert (run.status, run.attempt, run.runner) == ("success", 1, starts[0]["runner"]), run
    assert not cluster.where(event="error"), cluster.where(event="error")
    for worker in workers:
        worker.assert_clean_exit(10)


def test_stop_while_a_heartbeat_waits_for_the_store(cluster: Cluster, process_backend: Any) -> None:
    """SIGTERM while a heartbeat waits for the store: handed over, the late heartbeat renews nothing, exit 0."""
    # Each trial is one worker on a job of its own. Whether the waiting heartbeat
    # is still in flight when the worker closes its store depends on which of it
    # and the release gets the lock first (the release, nearly always): three
    # trials make the outcome certain either way.
    for trial in range(3):
        _stop_while_a_heartbeat_waits(cluster, process_backend, f"p{trial + 1}", f"{cluster.job}-{trial + 1}")


def _stop_while_a_heartbeat_waits(cluster: Cluster, backend: Any, runner: str, job: str) -> None:
    lease_ms = 3_000
    worker = cluster.start(runner, job=job, every=1.0, work=10.0, lease_ms=lease_ms, heartbeat_ms=HEARTBEAT_MS)
    ready = cluster.wait_for(event="ready", runner=runner, timeout=15)
    first = cluster.wait_event(
        lambda e: e["event"] == "handler-start" and e["runner"] == runner and e["slot_ms"] > ready["t"],
        timeout=6,
        message=f"(the first run of {runner})",
    )
    slot = first["slot_ms"]
    store = backend.open()
    renewed_run(store, job, slot, lease_ms)

    with store_write_lock(backend):
        # Heartbeats go out every interval and none can complete while the lock
        # is held: after a few intervals one is surely waiting inside the store.
        time.sleep(5 * HEARTBEAT_MS / 1000)
        worker.send(signal.SIGTERM)
        aborted = cluster.wait_for(event="aborted", slot_ms=slot, runner=runner, timeout=5)
        assert aborted["reason"] == "stop"
    # The release (sent right after "aborted") and the waiting heartbeat now race for the lock.
    cluster.wait_for(event="handover", slot_ms=slot, runner=runner, timeout=5)
    cluster.wait_for(event="stopped", runner=runner, timeout=10)
    worker.wait_exit(10)

    run = store.get_run(job, slot)
    assert run is not None
    assert (run.status, run.attempt, run.handed_over) == ("running", 1, True)
    assert run.lease_end_ms <= store.now_ms(), "a heartbeat renewed a released lease"
    worker.assert_clean_exit(0)
