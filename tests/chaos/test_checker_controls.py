"""The chaos checker on pause, resume, trigger and the stored attempts: synthetic logs, no processes.

Each test starts from :func:`~tests.chaos.sim.clean_run` (every1 triggered at 4500 and run by
C; skip3 paused from 8400 to 9600, C's claim of skip3@9000 answered ``paused``; every record
with its attempts), breaks one thing, and expects the invariant that names it to report a
violation, or adds something allowed and expects none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest


from .sim import assert_clean, assert_skipped, assert_violates, start

pytestmark = pytest.mark.timeout(30)


# -- paused_no_new_run -----------------------------------------------------------------------------


def test_a_scheduled_claim_won_while_paused(tmp_path: Path) -> None:
    """C's scheduled claim of skip3@9000, sent after the pause's answer, is won: a violation."""
    sim, h = start(tmp_path)
    h.c_paused_9000.update(outcome="won", attempt=1, token="c-9000", run_slot_ms=9000)
    assert_violates(sim.check(), "paused_no_new_run", "after the pause of 8400 was stored")


def test_a_run_stored_as_started_while_paused(tmp_path: Path) -> None:
    """No line shows it, but the store holds skip3@9000 started at 9000 by a schedule claim."""
    sim, _ = start(tmp_path)
    sim.record("skip3", 9000, 1, "x-9000", "C", "interrupted", "superseded by 12000")
    sim.attempts("skip3", 9000, (1, "C", "schedule", 9000, 11000, "expired"))
    assert_violates(sim.check(), "paused_no_new_run", "started at 9000 on the store's clock")


def test_the_same_run_while_the_store_clock_was_stepped_is_skipped(tmp_path: Path) -> None:
    """The store's clock was stepped during the pause: its times cannot order the run and the pause."""
    sim, _ = start(tmp_path)
    sim.record("skip3", 9000, 1, "x-9000", "C", "interrupted", "superseded by 12000")
    sim.attempts("skip3", 9000, (1, "C", "schedule", 9000, 11000, "expired"))
    sim.nemesis("clock-step", 8900, offset_ms=-3000)
    sim.nemesis("clock-back", 9300)
    assert_skipped(sim.check(), "paused_no_new_run")


@pytest.mark.parametrize("sent", [8399, 9600])
def test_claims_at_the_edges_of_a_pause_are_allowed(tmp_path: Path, sent: float) -> None:
    """A claim sent before the pause's answer, or once the resume was sent, may win."""
    sim, h = start(tmp_path)
    h.c_paused_9000.update(outcome="won", attempt=1, token="c-9000", run_slot_ms=9000)
    h.c_paused_9000["t0_mono_ns"] = int(sent * 1_000_000)
    h.c_paused_9000["t1_mono_ns"] = h.c_paused_9000["mono_ns"] = int((sent + 1) * 1_000_000)
    assert_clean(sim.check(), "paused_no_new_run")


def test_the_retry_of_a_claim_sent_before_the_pause_is_skipped(tmp_path: Path) -> None:
    """C's first try, sent before the pause, got no answer; its retry during the pause is answered
    won (rule 2: the store had carried the first try out): no new run, skipped."""
    sim, h = start(tmp_path)
    sim.claim("C", "skip3", 9000, 8300, None)
    h.c_paused_9000.update(outcome="won", attempt=1, token="c-9000", run_slot_ms=9000)
    assert_skipped(sim.check(), "paused_no_new_run")


def test_a_pause_that_raised_proves_nothing(tmp_path: Path) -> None:
    """A pause whose call raised may not have been stored: a run won after it is no violation."""
    sim, h = start(tmp_path)
    del h.pause["paused_ms"]
    h.pause["error"] = "ConnectionError: reset"
    h.c_paused_9000.update(outcome="won", attempt=1, token="c-9000", run_slot_ms=9000)
    report = sim.check()
    assert report.invariants["paused_no_new_run"].checked == 0 and report.invariants["paused_no_new_run"].ok


def test_a_manual_run_while_paused_is_allowed(tmp_path: Path) -> None:
    """A paused job's request runs all the same (rule 17)."""
    sim, h = start(tmp_path)
    h.c_paused_9000.update(outcome="won", attempt=1, token="c-9000", run_slot_ms=9000, reason="manual")
    sim.operator("trigger", "skip3", 8900, slot_ms=9000, expires_ms=49_000, state="pending")
    assert_clean(sim.check(), "paused_no_new_run")


def test_without_a_resume_before_now_the_monotonic_time_bounds_it(tmp_path: Path) -> None:
    """A resume that raised has no store time: the pause lasts, on the store's clock, at least
    as long as the monotonic time between the pause's answer and the resume's send."""
    sim, h = start(tmp_path)
    del h.resume["now_before_ms"]
    h.resume["error"] = "TimeoutError: timed out"
    sim.record("skip3", 9000, 1, "x-9000", "C", "interrupted", "superseded by 12000")
    sim.attempts("skip3", 9000, (1, "C", "schedule", 9500, 11000, "expired"))
    assert_violates(sim.check(), "paused_no_new_run", "after 9589")


# -- trigger_once ----------------------------------------------------------------------------------


def test_a_request_won_twice(tmp_path: Path) -> None:
    """B wins attempt 1 of the requested slot too, with a token of its own."""
    sim, _ = start(tmp_path)
    sim.won("B", "every1", 4500, 1, "b-4500", 4705, reason="manual")
    assert_violates(sim.check(), "trigger_once", "won 2 times")


def test_a_request_never_run_though_instances_were_up(tmp_path: Path) -> None:
    """long2 requested at 5000; B and C ran throughout and neither claimed it; it expired."""
    sim, _ = start(tmp_path)
    sim.operator("trigger", "long2", 5000, slot_ms=5000, expires_ms=45_000, state="pending")
    sim.final_state("long2", (5000, "expired"))
    assert_violates(sim.check(), "trigger_once", "never ran (the store shows it expired)")


def test_a_request_made_while_the_store_was_down_may_expire(tmp_path: Path) -> None:
    """The same request during a store restart: no instance could claim it; skipped, not blamed."""
    sim, _ = start(tmp_path)
    sim.nemesis("store-restart", 4990, duration_ms=3000)
    sim.operator("trigger", "long2", 5000, slot_ms=5000, expires_ms=45_000, state="pending")
    sim.final_state("long2", (5000, "expired"))
    assert_skipped(sim.check(), "trigger_once")


def test_a_request_skipped_as_an_overlap_is_allowed(tmp_path: Path) -> None:
    """skip3 requested at 4000 while B runs skip3@3000: C's manual claim is answered overlap."""
    sim, _ = start(tmp_path)
    sim.operator("trigger", "skip3", 4000, slot_ms=4000, expires_ms=44_000, state="pending")
    sim.claim("C", "skip3", 4000, 4200, "overlap", reason="manual", attempt=1, token="b-3000", run_slot=3000)
    sim.final_state("skip3", (4000, "skipped"))
    assert_clean(sim.check(), "trigger_once")


def test_a_request_that_ran_but_shows_expired(tmp_path: Path) -> None:
    """every1@4500 ran, yet the store's final state of its request is expired."""
    sim, _ = start(tmp_path)
    sim.logs["operator"] = [ln for ln in sim.logs["operator"] if ln.get("action") != "final-state"]
    sim.final_state("every1", (4500, "expired"))
    assert_violates(sim.check(), "trigger_once", "the request ran, yet the store shows it expired")


def test_a_requested_slot_won_by_a_scheduled_claim(tmp_path: Path) -> None:
    """The request's slot is won by a schedule claim and stored so."""
    sim, h = start(tmp_path)
    h.c_won_4500["reason"] = "schedule"
    h.stored_4500[0]["reason"] = "schedule"
    assert_violates(sim.check(), "trigger_once", "won by a non-manual claim")


def test_a_request_on_a_slot_of_the_schedule_may_be_run_by_its_scheduled_claim(tmp_path: Path) -> None:
    """A request whose slot is 7000, a slot of every1 (1 s): the scheduled claim of 7000 came first
    and ran the one run the request asked for (rule 12), and the store shows the request claimed;
    B's manual claim finds the run running."""
    sim, _ = start(tmp_path)
    sim.operator("trigger", "every1", 7000, slot_ms=7000, expires_ms=47_000, state="pending")
    sim.won("C", "every1", 7000, 1, "c-7000", 7000)
    sim.claim("B", "every1", 7000, 7005, "running", reason="manual", attempt=1, token="c-7000")
    sim.run("C", "every1", 7000, 1, "c-7000", 7002, 7200)
    sim.record("every1", 7000, 1, "c-7000", "C", "success")
    sim.attempts("every1", 7000, (1, "C", "schedule", 7000, 7201, "success"))
    sim.logs["operator"] = [ln for ln in sim.logs["operator"] if ln.get("action") != "final-state"]
    sim.final_state("every1", (4500, "claimed"), (7000, "claimed"))
    sim.final_state("skip3")
    sim.sink_from_records()
    assert_clean(sim.check(), "trigger_once")


@pytest.mark.parametrize("won_by", ["schedule", "manual"])
def test_a_request_skipped_as_an_overlap_and_its_slot_run_later_by_the_schedule(tmp_path: Path, won_by: str) -> None:
    """every1 (1 s, overlap skip) requested at 7000, a slot of its schedule: B's manual claim finds
    the previous run alive and the request is skipped (rule 17); C's scheduled claim of 7000 comes
    later, once that run ended, and runs the slot as the schedule's run: no violation. Had a manual
    claim won that run, the request ran though the store shows it skipped: a violation."""
    sim, _ = start(tmp_path)
    sim.operator("trigger", "every1", 7000, slot_ms=7000, expires_ms=47_000, state="pending")
    sim.claim("B", "every1", 7000, 7005, "overlap", reason="manual", attempt=1, token="b-6000", run_slot=6000)
    sim.won("C", "every1", 7000, 1, "c-7000", 7300, reason=won_by)
    sim.run("C", "every1", 7000, 1, "c-7000", 7302, 7500)
    sim.record("every1", 7000, 1, "c-7000", "C", "success")
    sim.attempts("every1", 7000, (1, "C", won_by, 7300, 7501, "success"))
    sim.logs["operator"] = [ln for ln in sim.logs["operator"] if ln.get("action") != "final-state"]
    sim.final_state("every1", (4500, "claimed"), (7000, "skipped"))
    sim.final_state("skip3")
    sim.sink_from_records()
    if won_by == "schedule":
        assert_clean(sim.check(), "trigger_once")
    else:
        assert_violates(sim.check(), "trigger_once", "the request ran, yet the store shows it skipped")


@pytest.mark.parametrize("trigger_raised", [False, True], ids=["nobody_requested", "after_a_trigger_that_raised"])
def test_a_manual_run_with_no_request_logged(tmp_path: Path, trigger_raised: bool) -> None:
    """C wins a manual run of long2 at 6100 with no request logged: a violation, or skipped after a
    trigger of long2 that got no answer (it may have been stored)."""
    sim, _ = start(tmp_path)
    if trigger_raised:
        sim.operator("trigger", "long2", 6090, error="ConnectionError: reset")
    sim.won("C", "long2", 6100, 1, "c-6100", 6200, reason="manual")
    report = sim.check()
    if trigger_raised:
        assert_skipped(report, "trigger_once")
    else:
        assert_violates(report, "trigger_once", "won a manual run nobody requested")


# -- attempts_match --------------------------------------------------------------------------------

#: One stored attempt of the clean run changed: (the record's attempts in ``clean_run``'s handles,
#: the attempt's index, its changed fields), and what ``attempts_match`` reports of it.
BROKEN_ATTEMPTS = [
    # long2@8000's attempt 2 is stored as B's, but C logged winning it.
    pytest.param("stored_8000", 1, {"runner": "B"}, ["attempt #2 stored as B's"],
                 id="stored_runner_differs_from_the_logged_winner"),
    # long2@8000's attempt 2 is stored with reason schedule; C won it by a takeover.
    pytest.param("stored_8000", 1, {"reason": "schedule"}, ["won by a takeover claim"],
                 id="stored_reason_differs_from_the_winning_claim"),
    # every1@4500 succeeded, but its only attempt is stored failed.
    pytest.param("stored_4500", 0, {"outcome": "failed"},
                 ["run success, its last attempt #1 failed", "its runner's finish success was accepted"],
                 id="last_outcome_against_the_status"),
    # every1@12000's attempt 1 was released by C (accepted), but is stored expired.
    pytest.param("stored_12000", 0, {"outcome": "expired"}, ["stored expired, its runner's release was accepted"],
                 id="expired_although_its_release_was_accepted"),
    # An attempt followed by another is stored running (no end).
    pytest.param("stored_8000", 0, {"outcome": "running", "ended_ms": None}, ["attempt #1 running, yet #2 followed"],
                 id="an_earlier_attempt_that_did_not_end"),
    # long2@8000's attempt 1 (B, frozen, never released) is stored handed_over.
    pytest.param("stored_8000", 0, {"outcome": "handed_over"}, ["logged no accepted finish or release"],
                 id="handed_over_without_a_release_line"),
    # The stored attempts skip a number.
    pytest.param("stored_8000", 1, {"number": 3}, ["attempts numbered [1, 3]"], id="numbering_gap"),
    # On the store's clock, attempt 1 of long2@8000 ends after attempt 2 started.
    pytest.param("stored_8000", 0, {"ended_ms": 10_200}, ["ended at 10200, after #2 started at 10100"],
                 id="an_attempt_ending_after_the_next_began"),
]  # fmt: skip


@pytest.mark.parametrize("stored, index, changed, reported", BROKEN_ATTEMPTS)
def test_a_stored_attempt_that_contradicts_the_logs(
    tmp_path: Path, stored: str, index: int, changed: Dict[str, Any], reported: List[str]
) -> None:
    """A stored attempt that differs from what the logs show is reported by attempts_match, saying how."""
    sim, h = start(tmp_path)
    getattr(h, stored)[index].update(changed)
    report = sim.check()
    for text in reported:
        assert_violates(report, "attempts_match", text)


#: The same changes where the nemesis's log excuses them: (the changed attempt as above, the nemesis's lines).
EXCUSED_ATTEMPTS = [
    # long2@8000's attempt 1 stored handed_over, but B was killed after it won: its release line may be missing.
    pytest.param("stored_8000", 0, {"outcome": "handed_over"}, [("kill", 13950, "B", {})],
                 id="handed_over_by_a_runner_killed_later_is_skipped"),
    # The same, B got SIGTERM before it won: the engine releases such a run at once, and may exit meanwhile.
    pytest.param("stored_8000", 0, {"outcome": "handed_over"}, [("term", 7990, "B", {})],
                 id="handed_over_when_won_after_its_runner_got_sigterm_is_skipped"),
    # Attempt 1 ending after attempt 2 began, during a step of the store's clock: its times do not order them.
    pytest.param("stored_8000", 0, {"ended_ms": 10_200},
                 [("clock-step", 9000, None, {"offset_ms": 2000}), ("clock-back", 9500, None, {})],
                 id="the_same_order_while_the_store_clock_was_stepped_is_not_judged"),
]  # fmt: skip


@pytest.mark.parametrize("stored, index, changed, nemesis", EXCUSED_ATTEMPTS)
def test_a_stored_attempt_the_nemesis_explains(
    tmp_path: Path, stored: str, index: int, changed: Dict[str, Any], nemesis: List[Tuple[str, float, Any, Any]]
) -> None:
    """A stored attempt that differs from the logs where a fault explains it is not reported."""
    sim, h = start(tmp_path)
    getattr(h, stored)[index].update(changed)
    for action, at, runner, fields in nemesis:
        sim.nemesis(action, at, runner, **fields)
    assert_clean(sim.check(), "attempts_match")


@pytest.mark.parametrize("final_stop_at, excused", [(7990, True), (8500, False)], ids=["before_the_win", "after_it"])
def test_a_release_without_its_line_after_the_harness_final_sigterm(
    tmp_path: Path, final_stop_at: float, excused: bool
) -> None:
    """long2@8000's attempt 1 stored handed_over without B's release line: excused when B won it
    after the harness began its final SIGTERMs (``harness.jsonl``), as after a nemesis ``term``;
    reported when the final stop came only after the win."""
    sim, h = start(tmp_path)
    h.stored_8000[0].update({"outcome": "handed_over"})
    sim.final_stop(final_stop_at)
    report = sim.check()
    if excused:
        assert_clean(report, "attempts_match")
    else:
        assert_violates(report, "attempts_match", "logged no accepted finish or release")


def test_a_finish_without_its_line_is_reported_also_when_won_after_sigterm(tmp_path: Path) -> None:
    """A run won after its runner got SIGTERM is only released: stored success without a finish line is reported."""
    sim, h = start(tmp_path)
    h.stored_8000[0].update({"outcome": "success"})
    sim.nemesis("term", 7990, "B")
    assert_violates(sim.check(), "attempts_match", "logged no accepted finish or release")


def test_a_run_released_at_the_end_and_not_taken_over(tmp_path: Path) -> None:
    """A run still ``running`` whose last attempt was released (the instances stopped): allowed."""
    sim, _ = start(tmp_path)
    sim.won("B", "long2", 13500, 1, "b-13500", 13500)
    b135 = {"job": "long2", "slot_ms": 13500, "attempt": 1, "token": "b-13500"}
    sim.line("B", "start", 13502, reason="schedule", **b135)
    sim.call("B", "release", b135, 13910, True)
    sim.record("long2", 13500, 1, "b-13500", "B", "running")
    sim.attempts("long2", 13500, (1, "B", "schedule", 13500, 13911, "handed_over"))
    assert_clean(sim.check(), "attempts_match")
