"""Claims race: the store decides each one atomically, so exactly one claimant wins.

Threads each hold their own store handle (``backend.open()``), and for the
stores that several OS processes share, real processes open the store from
its URL. A barrier releases every claimant at once.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import pytest

import leasecron
from leasecron import Claim, Store
from tests.helpers import race_in_processes, wait_for

THREADS = 16
PROCESSES = 4
JOB = "race"
LONG = 30_000
SHORT = 150


def _race(claimants: List[Callable[[], Claim]]) -> List[Claim]:
    """Run each claimant in its own thread, released together by a barrier; their claims in order."""
    barrier = threading.Barrier(len(claimants))
    results: List[Optional[Claim]] = [None] * len(claimants)
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = claimants[i]()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(claimants))]
    # Switch threads as often as the interpreter can, so that in-process stores
    # (memory) are raced inside their atomic sections too, not only around them.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads), "a claimant thread hung"
    assert not errors, errors
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _expire(store: Store, lease_end_ms: int) -> None:
    wait_for(lambda: store.now_ms() > lease_end_ms, timeout=10)


def _one_winner(results: List[Claim], attempt: int) -> Claim:
    """Assert exactly one claim won ``attempt`` and every other one saw that run running."""
    outcomes = sorted(r.outcome for r in results)
    assert outcomes == ["running"] * (len(results) - 1) + ["won"], outcomes
    winner = next(r for r in results if r.won)
    assert winner.run is not None and winner.run.attempt == attempt
    for r in results:
        assert r.run is not None
        assert (r.run.token, r.run.attempt, r.run.runner) == (winner.run.token, attempt, winner.run.runner)
    return winner


@pytest.mark.parametrize("shared_handle", [False, True], ids=["own-handles", "one-handle"])
def test_racing_new_claims_have_exactly_one_winner(backend: Any, shared_handle: bool) -> None:
    """16 threads claiming the same new slot at once: exactly one wins attempt 1, the others are told running."""
    handles = [backend.open()] * THREADS if shared_handle else [backend.open() for _ in range(THREADS)]
    store = handles[0]
    base = store.now_ms() - 5_000
    for round_ in range(5):
        slot = base + round_ * 1_000
        results = _race(
            [
                (lambda h=h, i=i, slot=slot: h.claim(JOB, slot, runner=f"t{i}", lease_ms=LONG))
                for i, h in enumerate(handles)
            ]
        )
        winner = _one_winner(results, attempt=1)
        assert winner.run is not None
        assert store.get_run(JOB, slot) == winner.run
        assert store.finish(JOB, slot, winner.run.token, "success")
    assert len(store.runs(JOB)) == 5


def test_racing_takeovers_have_exactly_one_winner(backend: Any) -> None:
    """16 threads taking over the same expired run at once: exactly one wins attempt 2, the others are told running."""
    handles = [backend.open() for _ in range(THREADS)]
    store = handles[0]
    slot = store.now_ms() - 1_000
    first = store.claim(JOB, slot, runner="dead", lease_ms=SHORT)
    assert first.won and first.run is not None
    _expire(store, first.run.lease_end_ms)

    results = _race(
        [
            (lambda h=h, i=i: h.claim(JOB, slot, runner=f"t{i}", reason="takeover", lease_ms=LONG))
            for i, h in enumerate(handles)
        ]
    )
    winner = _one_winner(results, attempt=2)
    assert winner.run is not None and winner.run.token != first.run.token
    assert store.get_run(JOB, slot) == winner.run


def test_racing_new_claims_for_consecutive_slots_never_overlap(backend: Any) -> None:
    """Threads claiming two consecutive slots at once with overlap="skip": exactly one run is created."""
    handles = [backend.open() for _ in range(THREADS)]
    store = handles[0]
    s1 = store.now_ms() - 2_000
    s2 = s1 + 1_000
    results = _race(
        [
            (lambda h=h, i=i: h.claim(JOB, s1 if i % 2 else s2, runner=f"t{i}", lease_ms=LONG))
            for i, h in enumerate(handles)
        ]
    )
    winners = [r for r in results if r.won]
    assert len(winners) == 1
    assert len(store.runs(JOB)) == 1
    won_slot = winners[0].run.slot_ms if winners[0].run else None
    for i, r in enumerate(results):
        mine = s1 if i % 2 else s2
        if r.won:
            continue
        if mine == won_slot:
            assert r.outcome == "running"
        elif mine < won_slot:  # s1 after s2 exists
            assert r.outcome == "late"
        else:  # s2 while s1 is alive
            assert r.outcome == "overlap"
            assert r.run == winners[0].run


# -- OS processes ------------------------------------------------------------------------------


def claim_in_process(
    url: str,
    job: str,
    slot_ms: int,
    reason: str,
    runner: str,
    barrier: Any,
    results: Any,
) -> None:
    """Child process: open the store from its URL, wait for the others, claim, report (outcome, token, attempt)."""
    try:
        store = leasecron.open_store(url)
        try:
            store.get_run(job, slot_ms)  # connect (and check the schema) before the race
            barrier.wait(timeout=20)
            result = store.claim(job, slot_ms, runner=runner, reason=reason, lease_ms=LONG)
            run = result.run
            results.put((runner, result.outcome, run.token if run else None, run.attempt if run else None))
        finally:
            store.close()
    except BaseException as exc:  # the parent fails the test with it
        results.put((runner, "error", repr(exc), None))


def _race_processes(url: str, slot_ms: int, reason: str) -> List[Tuple[str, str, Optional[str], Optional[int]]]:
    collected = race_in_processes(claim_in_process, [(url, JOB, slot_ms, reason, f"p{i}") for i in range(PROCESSES)])
    assert not [c for c in collected if c[1] == "error"], collected
    return collected


@pytest.mark.processes
def test_racing_processes_new_claim_has_exactly_one_winner(process_backend: Any) -> None:
    """4 OS processes claiming the same new slot at once: exactly one wins attempt 1, the others are told running."""
    store = process_backend.open()
    slot = store.now_ms() - 1_000
    store.get_run(JOB, slot)  # create the schema once
    collected = _race_processes(process_backend.url(), slot, "schedule")
    outcomes = sorted(c[1] for c in collected)
    assert outcomes == ["running"] * (PROCESSES - 1) + ["won"], collected
    runner, _, token, attempt = next(c for c in collected if c[1] == "won")
    assert attempt == 1
    assert {c[2] for c in collected} == {token}
    run = store.get_run(JOB, slot)
    assert run is not None and (run.token, run.runner, run.attempt) == (token, runner, 1)


@pytest.mark.processes
def test_racing_processes_takeover_has_exactly_one_winner(process_backend: Any) -> None:
    """4 OS processes taking over one expired run at once: exactly one wins attempt 2, the others are told running."""
    store = process_backend.open()
    slot = store.now_ms() - 1_000
    first = store.claim(JOB, slot, runner="dead", lease_ms=SHORT)
    assert first.won and first.run is not None
    _expire(store, first.run.lease_end_ms)
    collected = _race_processes(process_backend.url(), slot, "takeover")
    outcomes = sorted(c[1] for c in collected)
    assert outcomes == ["running"] * (PROCESSES - 1) + ["won"], collected
    runner, _, token, attempt = next(c for c in collected if c[1] == "won")
    assert attempt == 2 and token != first.run.token
    assert {c[2] for c in collected} == {token}
    run = store.get_run(JOB, slot)
    assert run is not None and (run.token, run.runner, run.attempt) == (token, runner, 2)
