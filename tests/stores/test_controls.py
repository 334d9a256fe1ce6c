"""Pause, resume and manual runs, rule by rule, against every store (the ``store`` fixture).

Rules 16-19 of ``docs/protocol.rst`` (and of the docstrings of :class:`~leasecron.Store`): a
paused job's new scheduled claims are answered ``paused`` (16); a ``manual`` claim runs a pending
request for a manual run in place of rules 8-10 (17); ``pause`` and ``resume`` (18);
``request_run`` and ``pending_requests`` (19); and the changes to rules 9-12 that keep manual runs
apart from the schedule. Times are real, on the store's clock, as in ``test_contract``.
"""

from __future__ import annotations

import dataclasses
from contextlib import closing
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import pytest

import leasecron
from leasecron import Store
from leasecron.controls import JobState, ManualRequest
from leasecron.runs import LATE_TOLERANCE_MS
from leasecron.stores import DelegatingStore
from leasecron.stores.base import REQUESTS_KEPT
from tests.conftest import BACKENDS, Backend, selected_items
from tests.helpers import wait_for
from tests.stores.test_contract import JOB, LONG, claim, kill, recent, slots, stored, win

MANUAL = "manual"


def request(store: Store, job: str = JOB, by: str = "ops", **kwargs: Any) -> ManualRequest:
    """A request for a manual run, checked to be pending."""
    made = store.request_run(job, by=by, **kwargs)
    assert made.job == job and made.requested_by == by and made.state == "pending" and made.pending
    return made


def manual(store: Store, made: ManualRequest, **kwargs: Any) -> leasecron.Claim:
    """The manual claim of a request, by runner ``m1`` unless told otherwise."""
    kwargs.setdefault("runner", "m1")
    return store.claim(made.job, made.slot_ms, reason=MANUAL, **kwargs)


def state_of(store: Store, made: ManualRequest) -> str:
    """The state of a request as the store reads it now."""
    found = [r for r in store.job_state(made.job).requests if r.slot_ms == made.slot_ms]
    assert len(found) == 1, store.job_state(made.job)
    return found[0].state


def pending_slots(store: Store, job: str = JOB) -> List[int]:
    return [r.slot_ms for r in store.pending_requests() if r.job == job]


# -- rule 18: pause and resume ---------------------------------------------------------------------


def test_a_job_is_not_paused_and_has_no_requests_until_told(store: Store) -> None:
    """job_state of any job, with runs or without, is not paused and has no requests; job_states() is empty."""
    assert store.job_state(JOB) == JobState(JOB)
    win(store, recent(store))
    state = store.job_state(JOB)
    assert (state.paused, state.paused_by, state.paused_ms, state.note, state.requests) == (False, None, None, None, ())
    assert store.job_states() == []
    assert store.pending_requests() == []


def test_pause_records_who_when_and_why_on_the_store_clock(store: Store) -> None:
    """pause marks the job paused, by whom, at the store's now, with the note; job_state and job_states agree."""
    before = store.now_ms()
    state = store.pause(JOB, by="alice@ops", note="vendor API down: é ✓")
    after = store.now_ms()
    assert state.job == JOB and state.paused is True
    assert state.paused_by == "alice@ops" and state.note == "vendor API down: é ✓"
    assert state.paused_ms is not None and before <= state.paused_ms <= after
    assert state.requests == ()
    assert store.job_state(JOB) == state
    assert store.job_states() == [state]
    assert store.jobs() == []  # a pause is no run


def test_pausing_a_paused_job_replaces_who_when_and_why(store: Store) -> None:
    """A second pause replaces the first's who, when and note (a note may be left out)."""
    first = store.pause(JOB, by="alice", note="first")
    wait_for(lambda: store.now_ms() > (first.paused_ms or 0), interval=0.001)
    second = store.pause(JOB, by="bob")
    assert (second.paused, second.paused_by, second.note) == (True, "bob", None)
    assert second.paused_ms is not None and second.paused_ms > (first.paused_ms or 0)
    assert store.job_state(JOB) == second


def test_resume_clears_the_pause_and_resuming_an_unpaused_job_changes_nothing(store: Store) -> None:
    """resume clears the pause with its who, when and note; a job not paused stays as it was."""
    store.pause(JOB, by="alice", note="why")
    assert store.resume(JOB, by="bob") == JobState(JOB)
    assert store.job_state(JOB) == JobState(JOB)
    assert store.job_states() == []
    assert store.resume(JOB, by="bob") == JobState(JOB)
    assert store.resume("never-paused", by="bob") == JobState("never-paused")
    assert store.job_states() == []


def test_job_states_lists_paused_jobs_and_jobs_with_requests_sorted_by_name(store: Store) -> None:
    """job_states() holds every job that is paused or has requests kept, sorted by name, each once."""
    store.pause("b", by="ops")
    made = request(store, "a")
    store.pause("c", by="ops")
    store.resume("c", by="ops")
    store.pause("a", by="ops", note="both")
    request(store, "d")
    states = store.job_states()
    assert [s.job for s in states] == ["a", "b", "d"]
    assert states[0].paused and states[0].note == "both" and states[0].requests == (made,)
    assert states[1].paused and states[1].requests == ()
    assert not states[2].paused and len(states[2].requests) == 1
    assert states == [store.job_state(name) for name in ("a", "b", "d")]


def test_pauses_of_jobs_with_any_name_are_kept_apart(store: Store) -> None:
    """A pause holds for its exact job name only, whatever characters the names have."""
    names = ["a", "A", "{a}", "a:b", "a*", "%", "é", "e\u0301", "'; DROP TABLE x; --", "x" * 300]
    for name in names[::2]:
        store.pause(name, by="ops", note=name)
    for name in names:
        state = store.job_state(name)
        assert state.paused is (names.index(name) % 2 == 0), name
        assert state.note == (name if state.paused else None)
    assert [s.job for s in store.job_states()] == sorted(names[::2])


# -- rule 16: a paused job starts no scheduled run ------------------------------------------------


@pytest.mark.parametrize("reason", ["schedule", "catch-up"])
def test_a_scheduled_claim_of_a_paused_job_is_paused_and_writes_nothing(store: Store, reason: str) -> None:
    """A schedule or catch-up claim of a paused job for a slot with no run answers paused, before
    early and late are looked at; nothing is stored. Another job is not paused."""
    store.pause(JOB, by="ops")
    now = store.now_ms()
    for slot in (now - 1_000, now - 3_600_000, now + 60_000):  # due, far too late, far too early
        result = claim(store, slot, reason=reason, max_late_ms=0)
        assert result.outcome == "paused" and not result.won
        assert result.run is None
        assert store.get_run(JOB, slot) is None
    assert store.jobs() == []
    assert win(store, now - 1_000, job="other", reason=reason).job == "other"
    assert store.job_state(JOB).paused


def test_a_takeover_claim_of_a_paused_job_for_a_slot_without_run_is_none(store: Store) -> None:
    """Rule 7 comes before rule 16: a takeover claim finds no run."""
    store.pause(JOB, by="ops")
    assert claim(store, recent(store), reason="takeover").outcome == "none"


def test_a_run_already_running_goes_on_while_its_job_is_paused(store: Store) -> None:
    """Pausing does not touch a running run: other claims of its slot answer running, its heartbeat
    and finish work, and a backup still takes it over once its runner died."""
    slot = recent(store, 2_000)
    run = win(store, slot, lease_ms=LONG)
    store.pause(JOB, by="ops")
    for reason in ("schedule", "catch-up", "takeover"):
        assert store.claim(JOB, slot, runner="r2", reason=reason).outcome == "running"
    assert store.heartbeat(JOB, slot, run.token, LONG)
    kill(store, run)
    second = win(store, slot, runner="backup", reason="takeover", lease_ms=LONG)
    assert second.attempt == 2
    assert store.release(JOB, slot, second.token)
    third = win(store, slot, runner="backup-2", reason="takeover", lease_ms=LONG)
    assert third.attempt == 3
    assert store.finish(JOB, slot, third.token, "success")
    assert claim(store, slot).outcome == "done"
    assert claim(store, slot + 1_000).outcome == "paused"


def test_after_resume_the_next_slot_runs(store: Store) -> None:
    """A resumed job's next claim wins as usual."""
    store.pause(JOB, by="ops")
    slot = recent(store)
    assert claim(store, slot).outcome == "paused"
    store.resume(JOB, by="ops")
    assert win(store, slot).attempt == 1


# -- rule 19: requests for a manual run -------------------------------------------------------------


def test_a_request_is_for_the_store_now_and_expires_max_late_plus_10s_later(store: Store) -> None:
    """request_run's slot is the store's now (nothing sits there), and it expires max_late_ms + 10 s
    later; it is pending, kept in the job's state, and listed by pending_requests()."""
    before = store.now_ms()
    made = request(store, by="alice", max_late_ms=5_000)
    after = store.now_ms()
    assert before <= made.slot_ms <= after
    assert made.expires_ms == made.slot_ms + 5_000 + LATE_TOLERANCE_MS
    assert made == ManualRequest(JOB, made.slot_ms, "alice", made.expires_ms, "pending")
    assert store.job_state(JOB) == JobState(JOB, requests=(made,))
    assert store.job_states() == [JobState(JOB, requests=(made,))]
    assert store.pending_requests() == [made]
    default = request(store, job="other")
    assert default.expires_ms == default.slot_ms + 30_000 + LATE_TOLERANCE_MS
    assert store.jobs() == []  # a request is no run


def test_requests_made_within_one_millisecond_get_different_slots(store: Store) -> None:
    """Each request takes the store's now, or the first millisecond after it that the job's earlier
    requests left free: slots of one job never repeat."""
    made: List[ManualRequest] = []
    for _ in range(30):
        before = store.now_ms()
        made.append(request(store))
        after = store.now_ms()
        slot = made[-1].slot_ms
        assert slot >= before
        if len(made) > 1:
            assert slot > made[-2].slot_ms
            assert slot <= max(after, made[-2].slot_ms + 1)
        else:
            assert slot <= after
        assert made[-1].expires_ms - 30_000 - LATE_TOLERANCE_MS in range(before, after + 1)
    assert pending_slots(store) == [r.slot_ms for r in made]
    other = request(store, job="other")  # another job's requests leave its slots free
    assert other.slot_ms <= store.now_ms()


def test_a_request_moves_past_the_runs_at_the_store_now(store: Store) -> None:
    """When the job has runs at now and the milliseconds after it, the request takes the first free one."""
    for _ in range(10):
        start = store.now_ms() + 100
        for slot in range(start, start + 40):
            win(store, slot, overlap="allow", lease_ms=LONG)
        wait_for(lambda start=start: store.now_ms() >= start, interval=0.001)
        made = request(store)
        if store.now_ms() < start + 40:  # the request was made while runs sat at now
            assert made.slot_ms == start + 40
            assert store.get_run(JOB, made.slot_ms) is None
            return
    pytest.fail("the store's clock never stayed within the 40 ms of runs long enough for one request")


def test_pending_requests_lists_the_open_requests_of_every_job_oldest_first(store: Store) -> None:
    """pending_requests() holds the open requests of every job, oldest slot first: the pending ones,
    and a claimed one, as claimed, until it expires (its run may need a backup); a skipped one is
    no longer in it."""
    a = request(store, job="a")
    b = request(store, job="b")
    c = request(store, job="a")
    assert store.pending_requests() == sorted([a, b, c], key=lambda r: (r.slot_ms, r.job))
    assert manual(store, c, overlap="allow").won
    claimed_c = dataclasses.replace(c, state="claimed")
    assert store.pending_requests() == sorted([a, b, claimed_c], key=lambda r: (r.slot_ms, r.job))
    assert state_of(store, c) == "claimed" and not claimed_c.pending
    assert manual(store, a).outcome == "overlap"  # c's run holds its lease
    assert state_of(store, a) == "skipped"
    assert store.pending_requests() == sorted([b, claimed_c], key=lambda r: (r.slot_ms, r.job))


#: Three requests that expire LATE_TOLERANCE_MS after they were made (max_late_ms 0), the third claimed.
Expiring = Tuple[ManualRequest, ManualRequest, ManualRequest]
#: A store and the requests made on it, or what was raised making them.
Made = Tuple[Optional[Store], Union[Expiring, BaseException]]


def make_expiring_requests(store: Store) -> Expiring:
    """The first half of :func:`test_a_request_that_nobody_claims_expires`: the requests it waits out."""
    old = request(store, max_late_ms=0)
    other = request(store, job="other", max_late_ms=0)
    claimed = request(store, job="third", max_late_ms=0)
    assert manual(store, claimed, lease_ms=LONG).won
    assert dataclasses.replace(claimed, state="claimed") in store.pending_requests()
    return old, other, claimed


class ExpiringRequests:
    """The requests of :func:`test_a_request_that_nobody_claims_expires`, made on every store at once.

    That test has to wait out the 10 s of ``LATE_TOLERANCE_MS`` after its requests: one store after
    another, 10 s per store (six here, three more where ``test_delegating`` collects this module
    again). So the module's first test that opens a store (:func:`expiring_requests_made_early`)
    makes them on a store of every backend that this module's copies of the test are parametrized
    with (those selected in this session), each store in a namespace of its own, and the 10 s
    pass while the tests before them run: each copy finds its own requests expired already, or
    waits only for what is left of the 10 s. A store is opened the way that first test's own
    ``store`` is: through a DelegatingStore when that is one. What went wrong making the requests
    on a store (a failed assertion, an unreachable server) is raised in that store's copy.
    """

    TEST = "test_a_request_that_nobody_claims_expires"

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._request = request
        self._tmp_path_factory = tmp_path_factory
        self._backends: List[Backend] = []
        self._made: Optional[Dict[str, Made]] = None

    @property
    def started(self) -> bool:
        """Whether the requests were made (on every store selected)."""
        return self._made is not None

    def start(self, like: Store) -> None:
        """Make the requests on a store of every backend selected, opened the way ``like`` was."""
        self._made = {}
        for item in selected_items(self._request, self.TEST):
            name = item.callspec.params["backend"]
            self._made[name] = self._make(name, like)

    def _make(self, name: str, like: Store) -> Made:
        store: Optional[Store] = None
        try:
            backend = BACKENDS[name](self._tmp_path_factory.mktemp(f"expiring-{name}"))
            self._backends.append(backend)
            store = backend.open()
            if isinstance(like, DelegatingStore):
                store = DelegatingStore(store)
            return store, make_expiring_requests(store)
        except (Exception, pytest.fail.Exception, pytest.skip.Exception) as exc:  # raised in its own test
            return store, exc

    def of(self, name: str, like: Store) -> Tuple[Store, Expiring]:
        """The store of backend ``name`` and the requests made on it."""
        if self._made is None:
            self.start(like)
        assert self._made is not None
        if name not in self._made:  # a copy the session's items did not list: made now, alone
            self._made[name] = self._make(name, like)
        store, made = self._made[name]
        if isinstance(made, BaseException):
            raise made
        assert store is not None
        return store, made

    def close(self) -> None:
        """Close every store made, and clear its namespace."""
        for backend in self._backends:
            backend.close()


@pytest.fixture(scope="module")
def expiring_requests(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExpiringRequests]:
    """The module's :class:`ExpiringRequests`; its stores are closed at the end of the module."""
    with closing(ExpiringRequests(request, tmp_path_factory)) as made:
        yield made


@pytest.fixture(autouse=True)
def expiring_requests_made_early(request: pytest.FixtureRequest, expiring_requests: ExpiringRequests) -> None:
    """The module's first test that opens a store has the requests of :class:`ExpiringRequests` made."""
    if not expiring_requests.started and "store" in request.fixturenames:
        expiring_requests.start(like=request.getfixturevalue("store"))


def test_a_request_that_nobody_claims_expires(store: Store, backend: Any, expiring_requests: ExpiringRequests) -> None:
    """Rules 17 and 19 once the request's time ran out: it reads expired (job_state), leaves
    pending_requests(), and its manual claim is late and marks it expired; nothing is run. A
    claimed request leaves pending_requests() at its expiry too, and stays claimed. (The requests
    were made by :func:`make_expiring_requests`, on every store at once: see :class:`ExpiringRequests`.)"""
    store, (old, other, claimed) = expiring_requests.of(backend.name, like=store)
    last = max(old.expires_ms, other.expires_ms, claimed.expires_ms)  # made a few ms apart: all three expired
    wait_for(lambda: store.now_ms() > last, timeout=LATE_TOLERANCE_MS / 1000 + 5, interval=0.05)
    fresh = request(store)
    assert state_of(store, old) == "expired"
    assert store.pending_requests() == [fresh]
    result = manual(store, old)
    assert result.outcome == "late" and result.run is None
    assert store.get_run(JOB, old.slot_ms) is None
    assert state_of(store, old) == "expired"
    assert manual(store, old).outcome == "none"  # no longer pending
    assert state_of(store, other) == "expired"
    assert store.job_state("other").requests == (
        ManualRequest("other", other.slot_ms, "ops", other.expires_ms, "expired"),
    )
    assert state_of(store, claimed) == "claimed"
    assert manual(store, fresh).won


# -- rule 17: the manual claim --------------------------------------------------------------------


def test_a_manual_claim_without_a_pending_request_is_none_and_writes_nothing(store: Store) -> None:
    """A manual claim for a slot that has no request of its job answers none; nothing is stored."""
    slot = recent(store)
    assert claim(store, slot, reason=MANUAL).outcome == "none"
    made = request(store, job="other")
    assert claim(store, made.slot_ms, reason=MANUAL).outcome == "none"  # another job's request
    assert claim(store, made.slot_ms + 1, job="other", reason=MANUAL).outcome == "none"
    assert store.jobs() == []
    assert store.pending_requests() == [made]


def test_a_manual_claim_of_a_pending_request_wins_a_manual_run_and_claims_the_request(store: Store) -> None:
    """The manual claim wins attempt 1 (reason manual) at the request's slot; the request is claimed;
    a second manual claim of it follows rules 1-6 (running); the run is an ordinary run after that."""
    made = request(store)
    before = store.now_ms()
    result = manual(store, made, lease_ms=LONG, max_late_ms=0)
    after = store.now_ms()
    assert result.outcome == "won" and result.run is not None
    run = result.run
    assert (run.job, run.slot_ms, run.attempt, run.runner, run.reason) == (JOB, made.slot_ms, 1, "m1", MANUAL)
    assert run.status == "running" and before + LONG <= run.lease_end_ms <= after + LONG
    assert stored(store, JOB, made.slot_ms) == run
    assert state_of(store, made) == "claimed"
    assert store.pending_requests() == [dataclasses.replace(made, state="claimed")]
    again = manual(store, made, runner="m2")
    assert again.outcome == "running" and again.run == run
    assert store.finish(JOB, made.slot_ms, run.token, "success")
    assert manual(store, made, runner="m2").outcome == "done"


def test_the_retry_of_a_won_manual_claim_wins_it_again(store: Store) -> None:
    """A manual claim whose answer was lost is sent again with its token: rule 2, the same attempt."""
    made = request(store)
    run = manual(store, made, token="t-manual").run
    assert run is not None
    again = manual(store, made, token="t-manual")
    assert again.outcome == "won" and again.run is not None
    assert (again.run.attempt, again.run.token, again.run.started_ms) == (1, "t-manual", run.started_ms)


def test_a_paused_jobs_request_runs_all_the_same(store: Store) -> None:
    """Pausing a job leaves its requests alone: a manual claim wins while scheduled claims are paused."""
    store.pause(JOB, by="ops")
    made = request(store)
    assert manual(store, made).won
    assert claim(store, recent(store, 2_000)).outcome == "paused"
    assert state_of(store, made) == "claimed"


def test_a_manual_claim_is_not_late_because_of_a_newer_scheduled_run(store: Store) -> None:
    """Rule 9 does not apply to a manual claim: a newer slot with a (finished) scheduled run leaves it free."""
    made = request(store)
    newer = win(store, made.slot_ms + 500)
    assert store.finish(JOB, newer.slot_ms, newer.token, "success")
    assert manual(store, made, max_late_ms=0).won


def test_a_scheduled_claim_is_not_late_because_of_a_newer_manual_run(store: Store) -> None:
    """Rule 9 looks at newer runs that a manual claim did not start: a manual run after the slot
    leaves a scheduled claim free; a scheduled run after it still makes it late."""
    made = request(store)
    run = manual(store, made).run
    assert run is not None and store.finish(JOB, run.slot_ms, run.token, "success")
    s1 = made.slot_ms - 3_000
    assert win(store, s1).slot_ms == s1
    assert store.finish(JOB, s1, stored(store, JOB, s1).token, "success")
    late = claim(store, s1 - 1_000)  # s1 is a newer scheduled run
    assert late.outcome == "late"
    assert late.run is None or late.run.slot_ms == s1
    assert slots(store.runs(JOB)) == [made.slot_ms, s1]


def test_a_live_scheduled_run_makes_a_manual_claim_an_overlap_and_skips_the_request(store: Store) -> None:
    """overlap="skip": an earlier scheduled run with a live lease makes the manual claim an overlap
    (its run is that one); the request is skipped, and claiming it again is none. With "allow" it wins."""
    live = win(store, recent(store, 2_000), lease_ms=LONG)
    made = request(store)
    result = manual(store, made)
    assert result.outcome == "overlap" and result.run == live
    assert store.get_run(JOB, made.slot_ms) is None
    assert state_of(store, made) == "skipped"
    assert store.pending_requests() == []
    assert manual(store, made).outcome == "none"
    allowed = request(store)
    assert manual(store, allowed, overlap="allow").won
    assert stored(store, JOB, live.slot_ms) == live


def test_a_later_live_scheduled_run_makes_a_manual_claim_an_overlap(store: Store) -> None:
    """Rule 17 looks at every other slot of the job: a scheduled run after the request's slot counts too."""
    made = request(store)
    later = win(store, made.slot_ms + 2_000, lease_ms=LONG)
    result = manual(store, made)
    assert result.outcome == "overlap" and result.run == later
    assert state_of(store, made) == "skipped"


def test_a_live_manual_run_makes_scheduled_claims_of_earlier_and_later_slots_overlaps(store: Store) -> None:
    """A manual run with a live lease blocks a new scheduled run of any slot (overlap="skip"):
    an earlier one (not late: the newer run is manual) and a later one."""
    made = request(store)
    run = manual(store, made, lease_ms=LONG).run
    assert run is not None
    for slot in (made.slot_ms - 2_000, made.slot_ms + 2_000):
        result = claim(store, slot)
        assert result.outcome == "overlap" and result.run == run
        assert store.get_run(JOB, slot) is None
    assert claim(store, made.slot_ms - 2_000, overlap="allow").won


def test_an_overlap_answer_carries_the_newest_live_run(store: Store) -> None:
    """Of several live runs, the overlap answer carries the one of the newest slot: a later manual
    run rather than an earlier scheduled one."""
    early = win(store, recent(store, 5_000), lease_ms=LONG)
    made = request(store)
    manual_run = manual(store, made, lease_ms=LONG, overlap="allow").run
    assert manual_run is not None
    result = claim(store, made.slot_ms - 2_000)
    assert result.outcome == "overlap" and result.run == manual_run
    assert stored(store, JOB, early.slot_ms) == early


def test_a_new_scheduled_run_interrupts_a_later_manual_run_whose_lease_ended(store: Store) -> None:
    """Rule 11 marks every other run of the job whose lease ended, a later manual run too."""
    made = request(store)
    dead = manual(store, made, lease_ms=LONG).run
    assert dead is not None
    kill(store, dead)
    slot = made.slot_ms - 2_000
    assert win(store, slot).slot_ms == slot
    ended = stored(store, JOB, made.slot_ms)
    assert ended.status == "interrupted" and ended.token == dead.token
    assert [r.slot_ms for r in store.unfinished(JOB)] == [slot]


def test_a_manual_run_interrupts_the_runs_whose_lease_ended_before_and_after_it(store: Store) -> None:
    """A won manual claim marks interrupted every other running run of the job whose lease ended."""
    made = request(store)
    before = win(store, made.slot_ms - 2_000, lease_ms=LONG)
    after = win(store, made.slot_ms + 2_000, lease_ms=LONG, overlap="allow")
    kill(store, before)
    kill(store, after)
    assert manual(store, made).won
    for run in (before, after):
        assert stored(store, JOB, run.slot_ms).status == "interrupted"
    assert [r.slot_ms for r in store.unfinished(JOB)] == [made.slot_ms]


def test_a_scheduled_claim_won_at_a_requests_slot_claims_the_request(store: Store) -> None:
    """Rule 12: a run won at the slot of a pending request is the run it asked for: the request is
    claimed, and the manual claim that comes after finds that run (running)."""
    made = request(store)
    run = win(store, made.slot_ms, lease_ms=LONG)
    assert run.reason == "schedule"
    assert state_of(store, made) == "claimed"
    assert store.pending_requests() == [dataclasses.replace(made, state="claimed")]
    result = manual(store, made)
    assert result.outcome == "running" and result.run == run


def test_a_job_keeps_its_pending_requests_and_the_newest_ended_ones(store: Store) -> None:
    """request_run deletes the job's ended requests beyond the newest REQUESTS_KEPT; pending ones stay."""
    waiting = [request(store), request(store)]
    live = win(store, waiting[0].slot_ms - 2_000, lease_ms=LONG)
    skipped = [waiting[-1]]
    for _ in range(REQUESTS_KEPT + 5):
        # one request per millisecond: a slot freed by the pruning is never taken again
        wait_for(lambda: store.now_ms() > skipped[-1].slot_ms, interval=0.001)
        made = request(store)
        assert manual(store, made).outcome == "overlap"
        skipped.append(made)
    skipped.pop(0)
    other = request(store, job="other")
    wait_for(lambda: store.now_ms() > skipped[-1].slot_ms, interval=0.001)
    last = request(store)
    kept = store.job_state(JOB).requests
    assert [r.slot_ms for r in kept] == sorted(
        [r.slot_ms for r in waiting] + [r.slot_ms for r in skipped[-REQUESTS_KEPT:]] + [last.slot_ms]
    )
    assert [r.state for r in kept] == ["pending"] * 2 + ["skipped"] * REQUESTS_KEPT + ["pending"]
    assert store.job_state("other").requests == (other,)
    assert stored(store, JOB, live.slot_ms) == live


# -- bad arguments --------------------------------------------------------------------------------

BAD_CONTROL_CALLS = [
    ("pause", "job", ""),
    ("pause", "job", None),
    ("pause", "job", "x" * 1_025),
    ("pause", "by", ""),
    ("pause", "by", None),
    ("pause", "by", 5),
    ("pause", "by", "x" * 201),
    ("pause", "by", "a\x00b"),
    ("pause", "note", 5),
    ("pause", "note", b"why"),
    ("pause", "note", "x" * 1_001),
    ("pause", "note", "a\ud800"),
    ("resume", "job", 5),
    ("resume", "by", ""),
    ("resume", "by", None),
    ("job_state", "job", ""),
    ("job_state", "job", b"job"),
    ("request_run", "job", ""),
    ("request_run", "job", None),
    ("request_run", "by", ""),
    ("request_run", "by", 7),
    ("request_run", "max_late_ms", -1),
    ("request_run", "max_late_ms", True),
    ("request_run", "max_late_ms", 1.5),
    ("request_run", "max_late_ms", "1000"),
]

_CALLS: dict = {
    "pause": lambda store, a: store.pause(a["job"], by=a["by"], note=a["note"]),
    "resume": lambda store, a: store.resume(a["job"], by=a["by"]),
    "job_state": lambda store, a: store.job_state(a["job"]),
    "request_run": lambda store, a: store.request_run(a["job"], by=a["by"], max_late_ms=a["max_late_ms"]),
}


@pytest.mark.parametrize(
    "operation,arg,value", BAD_CONTROL_CALLS, ids=[f"{o}-{a}={v!r:.20}" for o, a, v in BAD_CONTROL_CALLS]
)
def test_controls_reject_bad_arguments(store: Store, operation: str, arg: str, value: Any) -> None:
    """pause, resume, job_state and request_run with a bad argument raise ConfigError naming it; nothing is stored."""
    args: dict = {"job": JOB, "by": "ops", "note": None, "max_late_ms": 1_000}
    args[arg] = value
    call: Callable[[Store, dict], Any] = _CALLS[operation]
    with pytest.raises(leasecron.ConfigError) as info:
        call(store, args)
    assert isinstance(info.value, ValueError)
    assert arg in str(info.value)
    assert store.job_states() == []
    assert store.pending_requests() == []
