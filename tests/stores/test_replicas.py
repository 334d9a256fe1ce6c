"""Rule 22 of docs/protocol.rst on every Redis-protocol store: with ``replicas=N`` a write is answered
only once N replicas hold it, and every other answer is never refused for want of replicas.

The servers of these tests have no replica, so ``WAIT`` confirms no write: every write raises
``StoreUnavailable``, and what it decided stays in the primary, where a retry with the claim's
token wins that same attempt (rule 2) once the store waits for no replica. The replicated
topologies (Sentinel, a replica that falls behind) are in test_sentinel.py.
"""

from __future__ import annotations

from typing import Iterator

import pytest

import leasecron
from leasecron import StoreUnavailable
from leasecron.stores import ClaimRequest, Finish, Store
from tests.conftest import BACKENDS, Backend

REDIS_LIKE = [name for name in BACKENDS if name in ("redis", "valkey", "redis-cluster")]
#: A long window: the slots of these tests are never late.
LATE = 2**49


@pytest.fixture(params=REDIS_LIKE)
def stores(request: pytest.FixtureRequest, tmp_path: object) -> Iterator["tuple[Store, Store]"]:
    """A store that waits for one replica (the servers have none) and one that waits for none, on
    one namespace."""
    backend: Backend = BACKENDS[request.param](tmp_path)
    try:
        waiting = leasecron.open_store(backend.url() + "&replicas=1&replica_wait_ms=20")
        plain = backend.open()
        yield waiting, plain
        waiting.close()
    finally:
        backend.close()


def test_rule_22_a_write_no_replica_confirmed_raises_and_its_retry_wins_the_same_attempt(
    stores: "tuple[Store, Store]",
) -> None:
    """A won claim, a renewal, a finish and a release raise StoreUnavailable saying how many replicas
    confirmed; each did happen on the primary: the claim's retry with its token wins attempt 1."""
    waiting, plain = stores
    with pytest.raises(StoreUnavailable, match=r"reached 0 of the 1 replicas .* replica_wait_ms \(20 ms\)"):
        waiting.claim("job", 1_000, runner="a", token="t1", max_late_ms=LATE)
    stored = plain.get_run("job", 1_000)
    assert stored is not None and (stored.token, stored.attempt) == ("t1", 1)
    again = plain.claim("job", 1_000, runner="a", token="t1", max_late_ms=LATE)
    assert again.won and again.run is not None and (again.run.attempt, again.run.token) == (1, "t1")
    for write in (
        lambda: waiting.heartbeat("job", 1_000, "t1", 30_000),
        lambda: waiting.finish("job", 1_000, "t1", "success"),
    ):
        with pytest.raises(StoreUnavailable, match="replicas"):
            write()
    done = plain.get_run("job", 1_000)
    assert done is not None and done.status == "success"
    plain.claim("job", 2_000, runner="a", token="t2", max_late_ms=LATE)
    with pytest.raises(StoreUnavailable, match="replicas"):
        waiting.release("job", 2_000, "t2")
    for control in (lambda: waiting.pause("job", by="op"), lambda: waiting.request_run("job", by="op")):
        with pytest.raises(StoreUnavailable, match="replicas"):
            control()


def test_rule_22_answers_that_wrote_nothing_are_never_refused(stores: "tuple[Store, Store]") -> None:
    """running, late, done, none and a refused heartbeat or finish wrote nothing a failover could lose:
    they are answered although no replica confirms anything, alone and in a batch."""
    waiting, plain = stores
    plain.claim("job", 1_000, runner="a", token="t1", max_late_ms=LATE)
    assert waiting.claim("job", 1_000, runner="b", max_late_ms=LATE).outcome == "running"
    assert waiting.claim("job", 1_000, runner="b", reason="takeover").outcome == "running"
    assert waiting.claim("job", 500, runner="b", reason="takeover").outcome == "none"
    assert waiting.claim("job", 500, runner="b", max_late_ms=LATE).outcome == "late"  # a newer slot has a run
    assert waiting.heartbeat("job", 1_000, "not the token", 30_000) is False
    assert waiting.finish("job", 1_000, "not the token", "failed") is False
    batch = [ClaimRequest("job", 1_000, "c", max_late_ms=LATE), ClaimRequest("other", 1, "c", reason="takeover")]
    assert [claim.outcome for claim in waiting.claim_many(batch)] == ["running", "none"]
    assert waiting.finish_many([Finish("job", 1_000, "not the token", "success")] * 2) == [False, False]
    plain.finish("job", 1_000, "t1", "success")
    assert waiting.claim("job", 1_000, runner="b", max_late_ms=LATE).outcome == "done"


def test_rule_22_a_batch_with_a_write_no_replica_confirmed_raises_whole(stores: "tuple[Store, Store]") -> None:
    """A batch in which one claim wrote raises: every claim is then sent again with its token
    (rule 21), and the one that won wins that same attempt."""
    waiting, plain = stores
    plain.claim("busy", 1_000, runner="a", max_late_ms=LATE)
    batch = [ClaimRequest("busy", 1_000, "b", max_late_ms=LATE), ClaimRequest("free", 1_000, "b", token="tb")]
    with pytest.raises(StoreUnavailable, match="replicas"):
        waiting.claim_many([ClaimRequest(r.job, r.slot_ms, r.runner, max_late_ms=LATE, token=r.token) for r in batch])
    again = plain.claim_one(ClaimRequest("free", 1_000, "b", max_late_ms=LATE, token="tb"))
    assert again.won and again.run is not None and again.run.attempt == 1


def test_rule_22_a_batch_of_finishes_with_one_that_finished_raises_whole(stores: "tuple[Store, Store]") -> None:
    """Rule 25 under rule 22: a batch in which one finish ended its run raises StoreUnavailable; that
    finish did happen on the primary, and the batch sent again answers false for it."""
    waiting, plain = stores
    won = plain.claim("job", 1_000, runner="a", token="t1", max_late_ms=LATE)
    assert won.won
    batch = [Finish("job", 1_000, "wrong", "success"), Finish("job", 1_000, "t1", "success")]
    with pytest.raises(StoreUnavailable, match="replicas"):
        waiting.finish_many(batch)
    done = plain.get_run("job", 1_000)
    assert done is not None and done.status == "success"
    assert plain.finish_many(batch) == [False, False]


def test_rule_22_a_recorded_return_no_replica_confirmed_raises_and_a_refused_one_is_answered(
    stores: "tuple[Store, Store]",
) -> None:
    """Rule 26 under rule 22: a record_return that wrote raises StoreUnavailable (it did happen on the
    primary: sent again, it answers false); one that wrote nothing answers false at once."""
    waiting, plain = stores
    assert plain.claim("job", 1_000, runner="a", token="t1", max_late_ms=LATE).won
    assert waiting.record_return("job", 1_000, 1, "not a", 5, "success") is False
    with pytest.raises(StoreUnavailable, match="replicas"):
        waiting.record_return("job", 1_000, 1, "a", 5, "success")
    stored = plain.get_run("job", 1_000)
    assert stored is not None and stored.attempts[0].returned == "success" and stored.status == "running"
    assert plain.record_return("job", 1_000, 1, "a", 5, "success") is False


@pytest.mark.parametrize("query", ["replicas=-1", "replicas=two", "replica_wait_ms=0", "replica_wait_ms=1.5"])
def test_bad_replica_options_are_config_errors_naming_them(query: str) -> None:
    """replicas is a whole number from 0, replica_wait_ms from 1 (0 would make WAIT wait for ever)."""
    name = query.partition("=")[0]
    with pytest.raises(leasecron.ConfigError, match=name):
        leasecron.open_store(f"redis://127.0.0.1:1/0?{query}")
