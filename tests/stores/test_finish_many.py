"""Rule 25: a batch of finishes (``Store.finish_many``), each decided as a single finish, on every store.

A batch holds a finish for every answer rule 14 gives (the current token, a wrong one, a run
already finished, a released run, a slot without a run), beside finishes of other jobs; its
answers and what it writes must be those of single finishes. A finish of a batch sees what an
earlier one of the same batch wrote. A bad finish fails the whole batch before any is decided,
naming its index; an empty batch answers ``[]`` without asking the store.
"""

from __future__ import annotations

import threading
from typing import List, Optional

import pytest

from leasecron import ConfigError, Run, Store
from leasecron.stores import ClaimRequest, DelegatingStore, Finish
from tests.stores.test_batch import in_threads

LONG = 30_000


def _won(store: Store, job: str, slot: int) -> str:
    """The token of a run of ``job`` at ``slot`` just claimed."""
    claim = store.claim(job, slot, runner="me", lease_ms=LONG)
    assert claim.won and claim.run is not None
    return claim.run.token


def _prepared(store: Store, job: str, slot: int, case: str) -> Finish:
    """A run of ``job`` in the state ``case`` names, and the finish the test sends for it."""
    if case == "nothing":
        return Finish(job, slot, "any-token", "success")
    token = _won(store, job, slot)
    if case == "ended":
        assert store.finish(job, slot, token, "success")
    if case == "released":
        assert store.release(job, slot, token)
    if case == "wrong":
        return Finish(job, slot, "not-the-token", "success")
    if case in ("failing", "ended"):
        return Finish(job, slot, token, "failed", "boom")
    return Finish(job, slot, token, "success")


def _shape(run: Optional[Run]) -> object:
    """What a finish decides of a run: its status, error, release and attempts (not its names or times)."""
    if run is None:
        return None
    return run.status, run.error, run.handed_over, [(a.number, a.outcome, a.error) for a in run.attempts]


def test_each_finish_of_a_batch_is_decided_as_alone(store: Store) -> None:
    """Rules 14, 20 and 25: each finish of a batch (the current token, failed with an error, a wrong
    token, a run already finished, a released run, a slot without a run) answers and writes what
    the same finish sent alone answers and writes on a twin run; the answers come in the batch's
    order."""
    slot = store.now_ms() - 1_000
    cases = ["ok", "wrong", "failing", "ended", "released", "nothing"]
    alone = [store.finish(*_prepared(store, f"alone-{case}", slot, case)) for case in cases]
    assert alone == [True, False, True, False, True, False]  # rule 14: a released run is still running
    batch = [_prepared(store, f"batch-{case}", slot, case) for case in cases]
    assert store.finish_many(batch) == alone
    for case in cases:
        assert _shape(store.get_run(f"batch-{case}", slot)) == _shape(store.get_run(f"alone-{case}", slot)), case
    failed = store.get_run("batch-failing", slot)
    assert failed is not None and failed.finished_ms is not None
    assert (failed.status, failed.error) == ("failed", "boom")
    assert [(a.outcome, a.error) for a in failed.attempts] == [("failed", "boom")]  # rule 20


def test_a_later_finish_sees_an_earlier_one_of_its_batch(store: Store) -> None:
    """Two finishes of one run in one batch: the first ends it, the second finds it ended (rule 25)."""
    slot = store.now_ms() - 1_000
    token = _won(store, "j", slot)
    assert store.finish_many([Finish("j", slot, token, "failed", "first"), Finish("j", slot, token, "success")]) == [
        True,
        False,
    ]
    run = store.get_run("j", slot)
    assert run is not None and (run.status, run.error) == ("failed", "first")


def test_a_batch_sent_again_with_the_same_tokens_changes_nothing(store: Store) -> None:
    """What the engine does when a batch's answer was lost: the finishes already decided answer
    false, and the runs stay as the first batch ended them."""
    slot = store.now_ms() - 1_000
    batch = [Finish(job, slot, _won(store, job, slot), "success") for job in ("a", "b", "c")]
    assert store.finish_many(batch) == [True, True, True]
    ended = [store.get_run(job, slot) for job in ("a", "b", "c")]
    assert store.finish_many(batch) == [False, False, False]
    assert [store.get_run(job, slot) for job in ("a", "b", "c")] == ended


def test_a_batch_of_hundreds_answers_each_finish_in_its_place(store: Store) -> None:
    """600 finishes of 300 runs, every other one with a wrong token, then each right one twice: the
    answers come in the order of the finishes, however a backend splits or orders the work
    (PostgreSQL sends 256 a statement, in the order of its locks; Redis Cluster one pipeline per node)."""
    slot = store.now_ms() - 1_000
    jobs = [f"many-{i:03d}" for i in range(300)]
    claims = store.claim_many([ClaimRequest(job, slot, "me", lease_ms=LONG) for job in jobs])
    tokens = [claim.run.token for claim in claims if claim.run is not None]
    assert len(tokens) == 300
    pairs = list(zip(jobs, tokens))
    batch = [Finish(job, slot, token if i % 2 else "wrong", "success") for i, (job, token) in enumerate(pairs)]
    batch += [Finish(job, slot, token, "failed", f"e{i}") for i, (job, token) in enumerate(pairs)]
    answers = store.finish_many(batch)
    assert answers[:300] == [bool(i % 2) for i in range(300)]
    assert answers[300:] == [not i % 2 for i in range(300)]
    for i, job in enumerate(jobs):
        run = store.get_run(job, slot)
        assert run is not None and run.status == ("success" if i % 2 else "failed"), job


def test_finish_many_races_single_finishes_of_the_same_runs(backend: object) -> None:
    """Four handles, two sending one batch of every run's finish, two finishing each run singly,
    all with the current token: each run is finished exactly once (one true answer per run)."""
    stores = [backend.open() for _ in range(4)]  # type: ignore[attr-defined]
    slot = stores[0].now_ms() - 1_000
    jobs = [f"race-{i}" for i in range(10)]
    tokens = {job: _won(stores[0], job, slot) for job in jobs}
    barrier = threading.Barrier(len(stores))
    answers: List[List[bool]] = [[] for _ in stores]

    def run(k: int) -> None:
        order = jobs[k:] + jobs[:k]
        barrier.wait(timeout=30)
        if k % 2 == 0:
            got = stores[k].finish_many([Finish(job, slot, tokens[job], "success") for job in order])
        else:
            got = [stores[k].finish(job, slot, tokens[job], "success") for job in order]
        answers[k] = [got[order.index(job)] for job in jobs]

    in_threads(len(stores), run)
    for i, job in enumerate(jobs):
        assert sum(per[i] for per in answers) == 1, job
    for store in stores:
        store.close()


def test_an_empty_batch_answers_nothing_without_asking_the_store(store: Store) -> None:
    """``finish_many([])`` is ``[]``, and no backend method is called."""
    called: List[str] = []

    class Watching(DelegatingStore):
        def _finish_many(self, finishes: List[Finish]) -> List[bool]:
            called.append("finish_many")
            return super()._finish_many(finishes)

        def _finish(self, *args: object) -> bool:  # type: ignore[override]
            called.append("finish")
            return False

    assert Watching(store).finish_many([]) == []
    assert Watching(store).finish_many(()) == []
    assert called == []


@pytest.mark.parametrize(
    "bad, message",
    [
        (Finish("j", 1, "t", "done"), "finishes[1] (job 'j'): status must be 'success' or 'failed'"),
        (Finish("", 1, "t", "success"), "finishes[1] (job ''): job"),
        (Finish("j", -1, "t", "success"), "finishes[1] (job 'j'): slot_ms"),
        (Finish("j", 1, "t\x00", "success"), "finishes[1] (job 'j'): token must not contain a NUL"),
        (Finish("j", 1, "t", "failed", 3), "finishes[1] (job 'j'): error must be a string or None"),  # type: ignore[arg-type]
        (("j", 1, "t", "success"), "finishes[1] must be a Finish, not"),
    ],
)
def test_a_bad_finish_fails_the_batch_before_any_is_decided(store: Store, bad: object, message: str) -> None:
    """ConfigError naming the finish's index; the good finish before it was not decided."""
    slot = store.now_ms() - 1_000
    token = _won(store, "good", slot)
    with pytest.raises(ConfigError) as caught:
        store.finish_many([Finish("good", slot, token, "success"), bad])  # type: ignore[list-item]
    assert message in str(caught.value), caught.value
    run = store.get_run("good", slot)
    assert run is not None and run.status == "running"


def test_a_delegating_store_passes_a_batch_to_the_inner_stores_own(store: Store) -> None:
    """DelegatingStore hands the batch to the inner store's ``_finish_many`` (its one round trip),
    not one ``_finish`` after the other."""
    slot = store.now_ms() - 1_000
    token = _won(store, "j", slot)
    assert DelegatingStore(store).finish_many([Finish("j", slot, token, "success")]) == [True]
    run = store.get_run("j", slot)
    assert run is not None and run.status == "success"
