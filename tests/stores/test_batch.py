"""Rule 21: a batch of claims (``Store.claim_many``), each decided as a single claim, on every store.

One batch holds a claim for every outcome of the contract's rules, each next to
claims of other jobs, and its answers must be the ones single claims give. A
claim of a batch sees what an earlier claim of the same batch wrote. Batches
race single claims and each other (threads, and real processes where the store
is shared): exactly one ``won`` per slot. On Redis Cluster the jobs of a batch
fall on different nodes.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Tuple

import pytest

from leasecron import Claim, ConfigError, Store
from leasecron.stores import ClaimRequest
from tests.helpers import wait_for

LONG = 30_000


def in_threads(count: int, work: Callable[[int], object]) -> None:
    """``work(k)`` for k in ``range(count)``, each in a thread of its own, all joined; an exception
    of any of them fails the test here."""
    errors: List[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def _expire(store: Store, lease_end_ms: int) -> None:
    wait_for(lambda: store.now_ms() > lease_end_ms, timeout=10)


def test_every_outcome_inside_one_batch(store: Store) -> None:
    """won (a new run, a next attempt, the retry of a won claim, a manual run), running, done,
    early, late, overlap, none and paused: one batch answers each as a single claim would, and
    writes what a single claim writes."""
    now = store.now_ms()
    slot = now - 1_000
    # set-up, with single claims
    running = store.claim("running", slot, runner="other", lease_ms=LONG)
    finished = store.claim("done", slot, runner="other", lease_ms=LONG)
    assert finished.run is not None and store.finish("done", slot, finished.run.token, "success")
    overlapped = store.claim("overlap", slot - 60_000, runner="other", lease_ms=LONG, max_late_ms=LONG * 10)
    dead = store.claim("dead", slot, runner="other", lease_ms=1)
    retried = store.claim("retry", slot, runner="me", lease_ms=LONG, token="tok-retry")
    store.pause("paused", by="ops")
    request = store.request_run("manual", by="ops")
    assert running.won and overlapped.won and dead.won and retried.won and dead.run is not None
    _expire(store, dead.run.lease_end_ms)

    batch = [
        ClaimRequest("new", slot, "me", lease_ms=LONG),
        ClaimRequest("running", slot, "me"),
        ClaimRequest("done", slot, "me"),
        ClaimRequest("early", now + 60_000, "me"),
        ClaimRequest("late", now - 3_600_000, "me"),
        ClaimRequest("overlap", slot, "me"),
        ClaimRequest("nothing", slot, "me", reason="takeover"),
        ClaimRequest("paused", slot, "me"),
        ClaimRequest("dead", slot, "me", reason="takeover", lease_ms=LONG),
        ClaimRequest("retry", slot, "me", lease_ms=LONG, token="tok-retry"),
        ClaimRequest("manual", request.slot_ms, "me", reason="manual", lease_ms=LONG),
    ]
    answers = store.claim_many(batch)
    outcomes = {req.job: answer.outcome for req, answer in zip(batch, answers)}
    assert outcomes == {
        "new": "won", "running": "running", "done": "done", "early": "early", "late": "late",
        "overlap": "overlap", "nothing": "none", "paused": "paused", "dead": "won", "retry": "won",
        "manual": "won",
    }  # fmt: skip
    by_job: Dict[str, Claim] = {req.job: answer for req, answer in zip(batch, answers)}
    new, took_over, again, manual = by_job["new"].run, by_job["dead"].run, by_job["retry"].run, by_job["manual"].run
    assert new is not None and (new.attempt, new.runner, new.status) == (1, "me", "running")
    assert store.get_run("new", slot) == new
    assert took_over is not None and (took_over.attempt, took_over.runner, took_over.reason) == (2, "me", "takeover")
    assert [(a.number, a.outcome) for a in took_over.attempts] == [(1, "expired"), (2, "running")]
    assert again is not None and retried.run is not None
    assert (again.attempt, again.token) == (1, "tok-retry") and again.lease_end_ms >= retried.run.lease_end_ms
    assert manual is not None and (manual.reason, manual.runner) == ("manual", "me")
    assert [r.state for r in store.job_state("manual").requests] == ["claimed"]
    assert running.run is not None and by_job["running"].run == store.get_run("running", slot) == running.run
    assert by_job["overlap"].run is not None and by_job["overlap"].run.slot_ms == slot - 60_000
    for job in ("early", "late", "nothing", "paused"):
        assert by_job[job].run is None and store.get_run(job, slot) is None
    assert store.get_run("overlap", slot) is None


def test_a_claim_sees_what_an_earlier_claim_of_its_batch_wrote(store: Store) -> None:
    """Two claims of one slot in one batch: the first wins, the second finds the run running."""
    slot = store.now_ms() - 1_000
    first, second = store.claim_many([ClaimRequest("j", slot, "a", lease_ms=LONG), ClaimRequest("j", slot, "b")])
    assert (first.outcome, second.outcome) == ("won", "running")
    assert first.run is not None and second.run == first.run


def test_an_empty_batch_answers_nothing(store: Store) -> None:
    assert store.claim_many([]) == []


@pytest.mark.parametrize(
    "bad, message",
    [
        (ClaimRequest("j", 1, ""), "requests[1] (job 'j'): runner must be a non-empty string"),
        (ClaimRequest("", 1, "r"), "requests[1] (job ''): job"),
        (ClaimRequest("j", 1, "r", reason="whenever"), "requests[1] (job 'j'): reason must be one of"),
        (ClaimRequest("j", 1, "r", lease_ms=0), "requests[1] (job 'j'): lease_ms"),
        (("j", 1, "r"), "requests[1] must be a ClaimRequest, not"),
    ],
)
def test_a_bad_request_fails_the_batch_before_any_claim_is_decided(store: Store, bad: object, message: str) -> None:
    """ConfigError naming the request's index; the good claim before it was not decided."""
    slot = store.now_ms() - 1_000
    with pytest.raises(ConfigError) as caught:
        store.claim_many([ClaimRequest("good", slot, "r"), bad])  # type: ignore[list-item]
    assert message in str(caught.value), caught.value
    assert store.get_run("good", slot) is None


def test_batches_racing_single_claims_and_each_other_have_one_winner_per_slot(backend: object) -> None:
    """Eight threads, each with its own handle: four send one batch of every job's slot (in an
    order of their own), four claim each slot singly; every slot is won exactly once and every
    other answer is ``running`` with the winner's run."""
    jobs = [f"job-{i}" for i in range(12)]
    stores = [backend.open() for _ in range(8)]  # type: ignore[attr-defined]
    slot = stores[0].now_ms() - 1_000
    barrier = threading.Barrier(len(stores))
    answers: List[List[Tuple[str, Claim]]] = [[] for _ in stores]

    def batched(k: int) -> None:
        order = jobs[k:] + jobs[:k]
        barrier.wait(timeout=30)
        claims = stores[k].claim_many([ClaimRequest(job, slot, f"r{k}", lease_ms=LONG) for job in order])
        answers[k] = list(zip(order, claims))

    def single(k: int) -> None:
        barrier.wait(timeout=30)
        answers[k] = [(job, stores[k].claim(job, slot, runner=f"r{k}", lease_ms=LONG)) for job in reversed(jobs)]

    in_threads(len(stores), lambda k: (batched if k % 2 == 0 else single)(k))
    for job in jobs:
        claims = [claim for per in answers for j, claim in per if j == job]
        assert len(claims) == len(stores)
        assert sorted(c.outcome for c in claims) == ["running"] * (len(stores) - 1) + ["won"], job
        winner = next(c for c in claims if c.won)
        assert all(c.run == winner.run for c in claims), job
        assert stores[0].get_run(job, slot) == winner.run
    for store in stores:
        store.close()


def test_a_batch_of_hundreds_answers_each_claim_in_its_place(store: Store) -> None:
    """600 claims of 300 jobs, each job twice (by runners a, then b): the answers come in the
    order of the requests, however a backend splits or orders the work (PostgreSQL sends 256
    claims a statement, in the order of its locks)."""
    slot = store.now_ms() - 1_000
    jobs = [f"many-{i:03d}" for i in range(300)]
    batch = [ClaimRequest(job, slot, runner, lease_ms=LONG) for runner in ("a", "b") for job in jobs]
    answers = store.claim_many(batch)
    assert [a.outcome for a in answers] == ["won"] * 300 + ["running"] * 300
    for request, answer in zip(batch, answers):
        assert answer.run is not None and (answer.run.job, answer.run.runner) == (request.job, "a")
