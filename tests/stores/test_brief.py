"""Brief answers (``ClaimRequest.brief``), against every store (the ``store`` fixture).

A claim sent with ``brief=True`` that is answered ``running`` or ``done`` carries a
:class:`~leasecron.RunBrief` (``Claim.brief``; ``Claim.run`` is None) whose fields are the stored
run's; it is decided exactly as the same claim without ``brief``. Every other answer carries the
whole run, and ``Store.claim`` always does.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from leasecron import Claim, ConfigError, Run, RunBrief, Store, StoreError
from leasecron.stores import ClaimRequest
from leasecron.stores.records import read_brief
from tests.stores.test_contract import JOB, LONG, SHORT, expire, kill, recent, stored, win


def brief_claim(store: Store, slot_ms: int, runner: str = "r2", **kwargs: Any) -> Claim:
    """A claim of ``JOB`` at ``slot_ms`` sent with ``brief=True``."""
    return store.claim_one(ClaimRequest(JOB, slot_ms, runner, brief=True, **kwargs))


def brief_of(run: Run, manual: bool = False) -> RunBrief:
    """What a brief answer about ``run`` must carry."""
    return RunBrief(
        run.job, run.slot_ms, run.attempt, run.token, run.runner, run.status, run.lease_end_ms, run.handed_over, manual
    )


def assert_brief(claim: Claim, outcome: str, run: Run, manual: bool = False) -> None:
    assert claim.outcome == outcome
    assert claim.run is None and claim.brief == brief_of(run, manual)
    assert claim.found is claim.brief


def test_a_claim_on_a_live_lease_answers_running_with_the_brief_of_the_run(store: Store) -> None:
    run = win(store, recent(store), lease_ms=LONG)
    assert_brief(brief_claim(store, run.slot_ms), "running", run)
    takeover = brief_claim(store, run.slot_ms, reason="takeover")
    assert_brief(takeover, "running", run)
    assert stored(store, JOB, run.slot_ms) == run  # a brief answer is decided as any: nothing changed


@pytest.mark.parametrize("status", ["success", "failed"])
def test_a_claim_on_an_ended_run_answers_done_with_its_brief(store: Store, status: str) -> None:
    run = win(store, recent(store), lease_ms=LONG)
    assert store.finish(JOB, run.slot_ms, run.token, status, "boom" if status == "failed" else None)
    ended = stored(store, JOB, run.slot_ms)
    assert_brief(brief_claim(store, run.slot_ms), "done", ended)
    assert_brief(brief_claim(store, run.slot_ms, reason="takeover"), "done", ended)


def test_a_claim_that_interrupts_a_run_answers_done_with_the_brief_of_what_it_wrote(store: Store) -> None:
    older = win(store, recent(store, 3_000), lease_ms=SHORT)
    win(store, recent(store), lease_ms=LONG, overlap="allow")  # a newer run: the dead one is superseded (rule 4)
    expire(store, older)
    claim = brief_claim(store, older.slot_ms, reason="takeover")
    interrupted = stored(store, JOB, older.slot_ms)
    assert interrupted.status == "interrupted"
    assert_brief(claim, "done", interrupted)


def test_a_brief_answer_says_a_run_was_handed_over(store: Store) -> None:
    first = win(store, recent(store), lease_ms=LONG)
    assert store.release(JOB, first.slot_ms, first.token)
    second = win(store, first.slot_ms, runner="r3", reason="takeover", lease_ms=LONG)
    assert second.handed_over
    assert_brief(brief_claim(store, first.slot_ms), "running", second)


def test_a_brief_answer_says_a_manual_claim_started_the_run_even_after_a_takeover(store: Store) -> None:
    made = store.request_run(JOB, by="ops")
    manual = win(store, made.slot_ms, runner="m1", reason="manual", lease_ms=SHORT)
    assert_brief(brief_claim(store, made.slot_ms, reason="takeover"), "running", manual, manual=True)
    kill(store, manual)
    taken = win(store, made.slot_ms, runner="r3", reason="takeover", lease_ms=LONG)
    assert taken.reason == "takeover" and taken.attempt == 2
    assert_brief(brief_claim(store, made.slot_ms, reason="takeover"), "running", taken, manual=True)
    scheduled = win(store, recent(store, 500), lease_ms=LONG, overlap="allow")
    assert_brief(brief_claim(store, scheduled.slot_ms), "running", scheduled, manual=False)


def test_every_other_answer_carries_the_whole_run(store: Store) -> None:
    slot = recent(store, 2_000)
    won = brief_claim(store, slot, runner="r1", lease_ms=LONG)
    assert won.outcome == "won" and won.brief is None and won.run is not None and won.found is won.run
    assert won.run == stored(store, JOB, slot)
    overlap = brief_claim(store, slot + 1_000)  # overlap="skip": the earlier run holds its lease
    assert overlap.outcome == "overlap" and overlap.brief is None and overlap.run == won.run
    late = brief_claim(store, slot - 1_000)  # older than the newest run (rule 9)
    assert late.outcome == "late" and late.brief is None and late.run == won.run
    assert store.claim(JOB, slot, runner="r2").run == won.run  # Store.claim: the whole run
    assert store.claim_one(ClaimRequest(JOB, slot, "r2")).brief is None


def test_a_batch_answers_each_claim_as_it_asked(store: Store) -> None:
    live = win(store, recent(store), lease_ms=LONG)
    other = win(store, recent(store), job="other", lease_ms=LONG)
    answers = store.claim_many(
        [
            ClaimRequest(JOB, live.slot_ms, "r2", brief=True),
            ClaimRequest("other", other.slot_ms, "r2"),
            ClaimRequest("third", recent(store), "r2", brief=True),
        ]
    )
    assert [a.outcome for a in answers] == ["running", "running", "won"]
    assert_brief(answers[0], "running", live)
    assert answers[1].brief is None and answers[1].run == other
    assert answers[2].brief is None and answers[2].run is not None and answers[2].run.job == "third"


@pytest.mark.parametrize("brief", ["yes", 1, None])
def test_brief_must_be_a_bool(store: Store, brief: object) -> None:
    with pytest.raises(ConfigError, match="brief must be True or False"):
        store.claim_one(ClaimRequest(JOB, recent(store), "r1", brief=brief))  # type: ignore[arg-type]


# -- read_brief: how a brief answer is read back, on every backend that reads stored fields ----

FIELDS: Dict[str, Any] = {
    "attempt": "2", "token": "t", "runner": "r", "status": "running", "lease_end_ms": "1700000000000",
    "released": "0", "handovers": "1", "reason": "takeover", "error": None, "started_ms": "1699999990000",
    "manual": "1",
}  # fmt: skip


def test_read_brief_reads_the_fields_as_a_store_writes_them() -> None:
    assert read_brief("job", "1699999980000", FIELDS) == RunBrief(
        "job", 1699999980000, 2, "t", "r", "running", 1700000000000, True, True
    )
    as_sql = dict(FIELDS, attempt=2, lease_end_ms=1700000000000, handovers=0, manual=False, started_ms=1699999990000)
    assert read_brief("job", 1699999980000, as_sql) == RunBrief(
        "job", 1699999980000, 2, "t", "r", "running", 1700000000000, False, False
    )


@pytest.mark.parametrize(
    "field, value",
    [("attempt", "x"), ("attempt", "0"), ("token", 5), ("status", "gone"), ("lease_end_ms", None),
     ("handovers", "-1"), ("manual", "2"), ("runner", None)],
)  # fmt: skip
def test_read_brief_of_a_tampered_run_is_a_store_error_naming_it(field: str, value: Any) -> None:
    with pytest.raises(StoreError, match=r"job 'job' at slot 1699999980000 is unreadable"):
        read_brief("job", "1699999980000", dict(FIELDS, **{field: value}))
