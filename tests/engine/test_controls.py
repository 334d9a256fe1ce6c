"""Operating a cluster (issue 14; docs/protocol.rst rules 16-19): ``pause``, ``resume``, ``trigger``
and ``remove_job`` on real instances and real stores, the ``poll_ms`` option, and their log lines.

What an instance decides about each outcome (paused, a request's claim, overlap, expiry, a removed
job) is stepped without waiting in test_stepped.py; here the same things happen end to end, on
every store, on the real clock, and the timing bounds are the documented ones (a trigger runs
within ``poll_ms`` plus a claim) with the engine tests' one ``MARGIN``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from leasecron.stored import Poll
from leasecron import ConfigError, LeaseCron, MemoryStore, Store
from leasecron.events import slot_text
from leasecron.jobs import Job
from tests.conftest import Backend
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import (
    CATCH_UP_HOUR,
    HOURLY,
    MARGIN,
    Calls,
    CountingPolls,
    Recorder,
    dead_claim,
    handler,
    latest_hourly_slot,
    request_states,
    stored,
    wait_store_time,
)
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(60)


# -- pause and resume ----------------------------------------------------------------------------


def test_pause_skips_the_next_slot_on_two_instances_and_resume_restores_the_next_one(make_cron: MakeCron) -> None:
    """A pause made on one instance is seen by both at their next slot (skip, reason paused, no run);
    after resume the next slot runs again, and the slots skipped meanwhile are not caught up."""
    a, b = make_cron("a", catch_up_ms=0), make_cron("b", catch_up_ms=0)
    recs = [Recorder(a), Recorder(b)]
    for cron in (a, b):
        cron.add_job(lambda: None, 1, name="job")
    a.start()
    b.start()
    wait_for(lambda: any(r.of("success") for r in recs), 3)
    state = a.pause("job", note="vendor API down")
    assert (state.job, state.paused, state.paused_by, state.note) == ("job", True, "a", "vendor API down")
    paused_at = a.store.now_ms()
    assert state.paused_ms is not None and paused_at - 1_000 < state.paused_ms <= paused_at
    first = [r.wait("skip", timeout=3, reason="paused") for r in recs]
    assert first[0].slot_ms == first[1].slot_ms and first[0].run is None
    for rec in recs:
        rec.wait("skip", timeout=3, reason="paused", slot_ms=first[0].slot_ms + 1_000)
    assert b.resume("job").paused is False
    resumed_at = a.store.now_ms()
    after = wait_for(lambda: [e for r in recs for e in r.of("success") if e.slot_ms > resumed_at], 3)
    assert after[0].slot_ms <= resumed_at + 1_000
    skipped = [r.slot_ms for r in a.store.runs("job") if first[0].slot_ms <= r.slot_ms < resumed_at - MARGIN]
    assert skipped == []  # never caught up
    assert all(e.reason == "paused" for r in recs for e in r.of("skip"))


def test_a_paused_jobs_runs_go_on_and_a_dead_runners_run_is_taken_over(make_cron: MakeCron, gates: Gates) -> None:
    """Pausing touches no run already running: a live run goes on renewing its lease and succeeds,
    and the run of a runner that died (a store-level dead claim) is taken over by a backup."""
    a, b = make_cron("a", catch_up_ms=CATCH_UP_HOUR), make_cron("b", catch_up_ms=CATCH_UP_HOUR)
    rec_a, rec_b = Recorder(a), Recorder(b)
    calls, go = Calls(), gates()
    a.add_job(handler(a.store, calls, lambda ctx: go.wait(10)), HOURLY, name="live")
    b.add_job(lambda: None, HOURLY, name="dead")
    slot = latest_hourly_slot(b.store)
    dead = dead_claim(b.store, "dead", slot, 400)
    assert b.pause("dead").paused  # b was never started: only the store is written
    a.start()
    (ctx,) = calls.wait(1, timeout=3)
    a.pause("live", note="maintenance")
    lease_end = stored(a.store, "live", ctx.slot_ms).lease_end_ms
    b.start()
    start = rec_b.wait("start", timeout=3, job="dead")
    assert (start.slot_ms, start.attempt, start.reason) == (slot, 2, "takeover")
    assert start.run is not None and start.run.started_ms >= dead.lease_end_ms
    rec_b.wait("success", job="dead")
    wait_for(lambda: stored(a.store, "live", ctx.slot_ms).lease_end_ms > lease_end, 2)  # still renewed
    assert not ctx.signal.aborted
    go.set()
    rec_a.wait("success", job="live", slot_ms=ctx.slot_ms)
    assert a.store.job_state("live").paused and a.store.job_state("dead").paused


# -- trigger ------------------------------------------------------------------------------------------


def test_trigger_runs_exactly_once_across_three_instances_within_poll_ms_plus_a_claim(make_cron: MakeCron) -> None:
    """A trigger from an instance that was never started is run once, by one of three started
    instances, within poll_ms plus a claim, with reason manual in the start event and the Context;
    no other instance runs it."""
    poll = 300
    crons = [make_cron(runner, catch_up_ms=0, poll_ms=poll) for runner in ("a", "b", "c")]
    recs = [Recorder(cron) for cron in crons]
    calls = Calls()
    for cron in crons:
        cron.add_job(handler(cron.store, calls), HOURLY, name="job")
        cron.start()
    ops = make_cron("ops")
    ops.add_job(lambda: None, HOURLY, name="job")
    wait_for(lambda: all(cron.clock.synced for cron in crons), 3)
    slot = ops.trigger("job")
    (ctx,) = calls.wait(1, timeout=3)
    assert (ctx.slot_ms, ctx.reason, ctx.attempt) == (slot, "manual", 1)
    assert calls.times[0] - slot <= poll + MARGIN
    wait_store_time(ops.store, slot + 3 * poll)
    starts = [e for rec in recs for e in rec.of("start")]
    assert [(e.slot_ms, e.reason, e.runner) for e in starts] == [(slot, "manual", ctx.runner)] and len(calls) == 1
    wait_for(lambda: stored(ops.store, "job", slot).status == "success", 2)
    run = stored(ops.store, "job", slot)
    assert (run.reason, run.runner, [x.reason for x in run.attempts]) == ("manual", ctx.runner, ["manual"])
    assert request_states(ops.store) == [(slot, "claimed")]
    assert all(e.type in ("start", "success") for rec in recs for e in rec.of())


class HeldPolls(CountingPolls):
    """Counts the polls, and holds every poll after the first answered one until ``go`` is set
    (then it reads the store)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.go = threading.Event()
        self.answered = 0

    def _poll(self, since: int) -> Poll:
        if self.answered >= 1:
            self.go.wait(10)
        found = super()._poll(since)
        self.answered += 1  # polls are one at a time
        return found


def test_a_manual_run_whose_runner_died_is_taken_over_by_an_instance_that_polled_after_its_claim(
    make_cron: MakeCron,
) -> None:
    """The store lists a claimed request until it expires, and an instance that finds one it did not
    win backs its run up: the manual run of a runner that died (a store-level dead claim, made while
    b's second poll is held, so b never saw the request pending) is taken over by b."""
    polls = HeldPolls(make_cron().store)
    b = make_cron("b", store=polls, catch_up_ms=0, poll_ms=200)
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    b.start()
    wait_for(lambda: polls.answered >= 1 and b.clock.synced, 3)
    made = polls.request_run("job", by="ops")
    dead = dead_claim(polls, "job", made.slot_ms, 400, reason="manual")
    polls.go.set()
    start = rec.wait("start", timeout=3, job="job")
    assert (start.slot_ms, start.attempt, start.reason) == (made.slot_ms, 2, "takeover")
    assert start.run is not None and start.run.started_ms >= dead.lease_end_ms
    rec.wait("success", job="job")
    run = stored(polls, "job", made.slot_ms)
    assert [(a.runner, a.reason, a.outcome) for a in run.attempts] == [
        ("dead", "manual", "expired"),
        ("b", "takeover", "success"),
    ]


def test_trigger_on_a_started_instance_runs_there_without_waiting_for_a_poll(make_cron: MakeCron) -> None:
    """The instance that triggers, if started, claims the request at once (its next poll is a
    minute away)."""
    a = make_cron("a", catch_up_ms=0, poll_ms=60_000)
    rec = Recorder(a)
    a.add_job(lambda: None, HOURLY, name="job")
    a.start()
    wait_for(lambda: a.clock.synced, 3)
    slot = a.trigger("job")
    start = rec.wait("start", timeout=2)
    assert (start.slot_ms, start.reason) == (slot, "manual")
    assert rec.time_of(start) - slot <= MARGIN


def test_pause_resume_and_trigger_write_to_the_store_on_an_instance_never_started(backend: Backend) -> None:
    """They only write to the store: who is this instance's runner, the times are the store's; the
    request expires max_late_ms + 10 s after its slot. A job not registered here is refused."""
    cron = LeaseCron(backend.open(), runner="ops")
    cron.add_job(lambda: None, HOURLY, name="job", max_late_ms=5_000)
    store = cron.store
    before = store.now_ms()
    slot = cron.trigger("job")
    paused = cron.pause("job", note="why not")
    after = store.now_ms()
    assert before <= slot <= after and not cron.running
    (request,) = store.pending_requests()
    assert (request.job, request.slot_ms, request.requested_by) == ("job", slot, "ops")
    assert request.expires_ms == slot + 15_000
    assert (paused.paused, paused.paused_by, paused.note) == (True, "ops", "why not")
    assert paused.paused_ms is not None and before <= paused.paused_ms <= after
    assert store.job_state("job").paused
    resumed = cron.resume("job")
    assert (resumed.paused, resumed.paused_by, resumed.paused_ms, resumed.note) == (False, None, None, None)
    assert store.runs("job") == []
    for action in (cron.pause, cron.resume, cron.trigger, cron.remove_job):
        with pytest.raises(ConfigError, match=r"job 'nope' is not registered on this instance \(registered: 'job'\)"):
            action("nope")
    assert [s.job for s in store.job_states()] == ["job"]


def test_a_manual_run_obeys_overlap(make_cron: MakeCron, gates: Gates) -> None:
    """overlap="skip": a trigger while the job's run holds its lease is skipped (reason overlap,
    with that run) and its request marked skipped; the run goes on."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    calls, go = Calls(), gates()
    a.add_job(handler(a.store, calls, lambda ctx: go.wait(10)), HOURLY, name="job")
    a.start()
    (ctx,) = calls.wait(1, timeout=3)
    slot = a.trigger("job")
    skip = rec.wait("skip", timeout=2)
    assert (skip.slot_ms, skip.reason) == (slot, "overlap")
    assert skip.run is not None and skip.run.token == ctx.token
    assert request_states(a.store) == [(slot, "skipped")] and a.store.get_run("job", slot) is None
    go.set()
    rec.wait("success", slot_ms=ctx.slot_ms)
    assert len(calls) == 1


# -- remove_job ------------------------------------------------------------------------------------


def test_remove_job_stops_the_jobs_slots_on_this_instance_only(make_cron: MakeCron, gates: Gates) -> None:
    """After remove_job, this instance claims no slot of the job while the other instance runs
    every one; this instance's other jobs go on, and its live run of the removed job ends as usual."""
    a, b = make_cron("a", catch_up_ms=0), make_cron("b", catch_up_ms=0)
    rec_a, rec_b = Recorder(a), Recorder(b)
    calls, go = Calls(), gates()
    for cron in (a, b):
        cron.add_job(lambda: None, 1, name="job")
    a.add_job(lambda: None, 1, name="other")
    a.add_job(handler(a.store, calls, lambda ctx: go.wait(10)), HOURLY, name="long", catch_up_ms=CATCH_UP_HOUR)
    a.start()
    (ctx,) = calls.wait(1, timeout=3)
    b.start()
    removed = a.remove_job("long")
    assert isinstance(removed, Job) and removed.name == "long" and "long" not in a.jobs
    assert a.remove_job("job").name == "job" and sorted(a.jobs) == ["other"]
    removed_at = a.store.now_ms()
    later = removed_at + MARGIN
    wait_for(lambda: len([e for e in rec_b.of("success", job="job") if e.slot_ms > later]) >= 2, 4)
    wait_for(lambda: [e for e in rec_a.of("success", job="other") if e.slot_ms > later], 2)
    assert [e for e in rec_a.of(job="job") if e.slot_ms is not None and e.slot_ms > later] == []
    assert not ctx.signal.aborted
    go.set()
    rec_a.wait("success", job="long", slot_ms=ctx.slot_ms)
    with pytest.raises(ConfigError, match="remove_job: job 'long' is not registered"):
        a.remove_job("long")


# -- poll_ms ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("poll_ms", [0, -1, "1000", True, 1.5, 2**50 + 1])
def test_poll_ms_must_be_a_positive_integer(poll_ms: Any) -> None:
    """poll_ms is checked like every option, naming LeaseCron and the option."""
    with pytest.raises(ConfigError, match=r"LeaseCron: poll_ms must be an integer from 1 to 2\*\*50"):
        LeaseCron(MemoryStore(), runner="r", poll_ms=poll_ms)


def test_poll_ms_defaults_to_one_second() -> None:
    """The default is 1 000 ms."""
    assert LeaseCron(MemoryStore(), runner="r").poll_ms == 1_000


def test_each_instance_polls_once_per_poll_ms_whatever_the_number_of_its_jobs(make_cron: MakeCron) -> None:
    """One poll() call per poll_ms per instance: an instance of 40 jobs polls no more
    often than one of a single job, and never more than once per poll_ms."""
    poll = 100
    counted = {jobs: CountingPolls(make_cron().store) for jobs in (1, 40)}
    crons = {jobs: make_cron(f"r{jobs}", store=store, catch_up_ms=0, poll_ms=poll) for jobs, store in counted.items()}
    for jobs, cron in crons.items():
        for n in range(jobs):
            cron.add_job(lambda: None, HOURLY, name=f"job-{n}")
    began = time.monotonic()
    for cron in crons.values():
        cron.start()
    wait_for(lambda: all(store.polls >= 6 for store in counted.values()), 5)
    for cron in crons.values():
        cron.stop()
    elapsed_ms = (time.monotonic() - began) * 1000
    polls = {jobs: store.polls for jobs, store in counted.items()}
    assert all(count <= elapsed_ms // poll + 1 for count in polls.values()), (polls, elapsed_ms)


# -- the log ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_pause_resume_trigger_remove_and_skip_paused_log_one_line_each(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture
) -> None:
    """Each control logs one INFO line in the one shape, as a template with its arguments; a slot
    answered paused logs a ``skipped`` line with the reason."""
    caplog.set_level(logging.INFO, logger="leasecron")
    a = make_cron("ops", catch_up_ms=0)
    rec = Recorder(a)
    a.add_job(lambda: None, 1, name="job")
    a.add_job(lambda: None, HOURLY, name="gone")
    a.pause("job", note="vendor API down")
    a.pause("job")
    slot = a.trigger("gone")
    (request,) = a.store.pending_requests()
    a.remove_job("gone")
    a.start()
    skip = rec.wait("skip", timeout=3, reason="paused")
    a.resume("job")
    expected = [
        "leasecron: paused job 'job' runner 'ops': vendor API down",
        "leasecron: paused job 'job' runner 'ops'",
        f"leasecron: triggered job 'gone' slot {slot_text(slot)} runner 'ops' (manual): the request expires at"
        f" {slot_text(request.expires_ms)}",
        "leasecron: removed job 'gone' runner 'ops': its live runs here end as usual",
        f"leasecron: skipped job 'job' slot {slot_text(skip.slot_ms)} runner 'ops' (paused): the job is paused: no new"
        " run starts until it is resumed",
        "leasecron: resumed job 'job' runner 'ops'",
    ]
    records = [r for r in caplog.records if r.name == "leasecron" and r.getMessage() in expected]
    assert sorted(r.getMessage() for r in records) == sorted(expected)
    assert all(r.levelno == logging.INFO and r.args for r in records)
    assert [e for e in rec.of() if e.job == "gone"] == []
