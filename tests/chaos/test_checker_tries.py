"""The chaos checker on timeouts and retries: synthetic logs, no processes.

Each test starts from :func:`~tests.chaos.sim.clean_run`, whose C runs ``timeout2@4000``
(won at 4000, its try from 4002; the timeout seen at 5002, ignored until 6600, heartbeats every
500 ms, recorded ``timed out after 1000 ms``) and whose B runs ``retry2@6000`` (try 1 from 6002
raises at 6200, try 2 from 6302 returns at 6500, recorded success), breaks one thing, and
expects the invariant that names it to report it; or adds something allowed and expects none.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest


from .sim import TIMED_OUT, Sim, assert_clean, assert_violates, ns, start

pytestmark = pytest.mark.timeout(30)


def drop(sim: Sim, runner: str, lines: List[Dict[str, Any]]) -> None:
    """Remove ``lines`` from ``runner``'s log."""
    for line in lines:
        sim.logs[runner].remove(line)


def move(line: Dict[str, Any], at: float) -> None:
    """Log ``line`` at ``at`` ms instead."""
    line.update(mono_ns=ns(at), wall_ns=ns(at))


# -- timeout_enforced ------------------------------------------------------------------------------


def test_clean_run_judges_a_timeout_and_tries(tmp_path: Path) -> None:
    """The clean run's timed-out run and retried run are judged, and counted as effects."""
    sim, _ = start(tmp_path)
    report = sim.check()
    for name in ("timeout_enforced", "tries_sequential", "retry_outcome"):
        assert_clean(report, name)
    assert report.effects["timeouts"] == report.effects["timeouts_ignored"] == report.effects["retried_tries"] == 1


def test_a_timeout_honoured_at_once_passes(tmp_path: Path) -> None:
    """A handler that stops at its timeout (no grace) and is recorded timed out: nothing to report."""
    sim, _ = start(tmp_path)
    sim.won("A", "timeout2", 2000, 1, "a-t2000", 2000)
    sim.timed_out("A", "timeout2", 2000, 1, "a-t2000", 2002, 3001, 3002, ignored=False)
    sim.record("timeout2", 2000, 1, "a-t2000", "A", "failed", TIMED_OUT)
    report = sim.check()
    assert_clean(report, "timeout_enforced")
    assert report.ok, report.format_table()


def test_timeout_seen_before_timeout_ms(tmp_path: Path) -> None:
    """The signal aborted 'timeout' 800 ms after the claim was answered."""
    sim, h = start(tmp_path)
    move(h.c_timeout_4000.abort, 4801)
    assert_violates(sim.check(), "timeout_enforced", "before timeout_ms 1000 ms")


def test_timeout_seen_too_late(tmp_path: Path) -> None:
    """The handler worked 1.4 s with no timeout seen (due by 1000 ms + the 250 ms margin)."""
    sim, h = start(tmp_path)
    move(h.c_timeout_4000.abort, 5402)
    assert_violates(sim.check(), "timeout_enforced", "no timeout seen")


def test_late_timeout_of_a_frozen_process_is_no_violation(tmp_path: Path) -> None:
    """The same late timeout while C was frozen across its due time: its timers could not run."""
    sim, h = start(tmp_path)
    move(h.c_timeout_4000.abort, 5402)
    sim.nemesis("stop", 4950, "C")
    sim.nemesis("cont", 5390, "C")
    assert_clean(sim.check(), "timeout_enforced")


def test_late_timeout_of_a_starved_process_is_no_violation(tmp_path: Path) -> None:
    """The same late timeout while C logged no line at all from 4950 to 5390 with its handler
    ticking (starved of CPU; its heartbeat due at 5000 went at 5390): the bound is 440 ms
    later, so no violation."""
    sim, h = start(tmp_path)
    move(h.c_timeout_4000.abort, 5402)
    silent = [ln for ln in sim.logs["C"] if ns(4950) < ln["mono_ns"] < ns(5390)]
    for beat in [ln for ln in silent if ln["ev"] == "heartbeat"]:
        silent.remove(beat)
        beat.update(sent_mono_ns=ns(5390), recv_mono_ns=ns(5391))
        move(beat, 5391)
    drop(sim, "C", silent)
    assert_clean(sim.check(), "timeout_enforced")


def test_a_heartbeat_sent_just_after_the_timeout_on_waking_from_a_freeze_is_no_gap(tmp_path: Path) -> None:
    """C frozen from 4600 to 5390, across its timeout and its heartbeat's due time: on waking the
    abort comes at 5391 and the beat at 5392, after it. Both timers fell due in the freeze and
    run in either order: no gap (a postgresql-standby chaos run)."""
    sim, h = start(tmp_path)
    sim.nemesis("stop", 4600, "C")
    sim.nemesis("cont", 5390, "C")
    drop(sim, "C", [ln for ln in sim.logs["C"] if ns(4600) < ln["mono_ns"] < ns(5390) and ln["ev"] == "tick"])
    move(h.c_timeout_4000.abort, 5391)
    beat = next(c for c in h.c_timeout_4000.heartbeats if c["sent_mono_ns"] == ns(5002))
    beat.update(sent_mono_ns=ns(5392), recv_mono_ns=ns(5393))
    move(beat, 5393)
    assert_clean(sim.check(), "timeout_enforced")


def test_heartbeats_stopped_at_the_timeout(tmp_path: Path) -> None:
    """No heartbeat after the timeout although the handler worked on 1.6 s past it."""
    sim, h = start(tmp_path)
    drop(sim, "C", [c for c in h.c_timeout_4000.heartbeats if c["sent_mono_ns"] > ns(5002)])
    assert_violates(sim.check(), "timeout_enforced", "while it worked past its timeout")


def test_heartbeats_stopped_at_the_timeout_and_the_run_was_lost(tmp_path: Path) -> None:
    """The same, and C logged lost at 6100 (unrenewed), then stopped: its lease was not kept."""
    sim, h = start(tmp_path)
    drop(sim, "C", [c for c in h.c_timeout_4000.heartbeats if c["sent_mono_ns"] > ns(5002)])
    sim.line("C", "event", 6100, type="lost", reason="unrenewed", **h.c_timeout_4000.ids)
    assert_violates(sim.check(), "timeout_enforced", "while it worked past its timeout")


def test_a_heartbeat_held_up_through_a_stall_keeps_the_lease(tmp_path: Path) -> None:
    """A heartbeat sent at 5502 and answered (failed) at 6400 in a stall was in flight: no gap."""
    sim, h = start(tmp_path)
    beats = [c for c in h.c_timeout_4000.heartbeats if c["sent_mono_ns"] > ns(5400)]
    drop(sim, "C", beats)
    sim.nemesis("stall", 5450, "C")
    sim.line("C", "heartbeat", 6400, ok=None, error="StoreUnavailable: timed out", sent_mono_ns=ns(5502),
             recv_mono_ns=ns(6400), **h.c_timeout_4000.ids)  # fmt: skip
    sim.nemesis("unstall", 6390, "C")
    assert_clean(sim.check(), "timeout_enforced")


@pytest.mark.parametrize(
    "change, text",
    [
        ("finish success", "yet finished success"),
        ("other limit", "its job's timeout_ms is 1000 ms"),
        ("event reason", "its failed event says reason None"),
        ("record", "yet recorded failed 'RuntimeError: x'"),
    ],
)
def test_timed_out_run_not_recorded_timed_out(tmp_path: Path, change: str, text: str) -> None:
    """After a timeout the finish, the failed event and the record all say timed out."""
    sim, h = start(tmp_path)
    run = h.c_timeout_4000
    if change == "finish success":
        run.finish.update(status="success", failure=None)
    elif change == "other limit":
        run.finish["failure"] = "timed out after 2000 ms"
    elif change == "event reason":
        run.event["reason"] = None
    else:
        h.rec_t4000["error"] = "RuntimeError: x"
    assert_violates(sim.check(), "timeout_enforced", text)


def test_timed_out_run_released(tmp_path: Path) -> None:
    """A run released (handed over) after its timeout instead of being recorded failed."""
    sim, h = start(tmp_path)
    drop(sim, "C", [h.c_timeout_4000.finish])
    sim.call("C", "release", h.c_timeout_4000.ids, 6601, True)
    assert_violates(sim.check(), "timeout_enforced", "yet released")


def test_stray_renewal_released_after_lost_is_no_hand_over(tmp_path: Path) -> None:
    """C's lease ran out in its grace (lost at 6100, a stall of its runner), and a heartbeat
    answered after that renewed it: the engine releases that stray renewal, no violation."""
    sim, h = start(tmp_path)
    run = h.c_timeout_4000
    drop(sim, "C", [c for c in run.heartbeats if c["sent_mono_ns"] > ns(5002)] + [run.finish, run.event])
    sim.nemesis("stall", 5100, "C")
    sim.line("C", "event", 6100, type="lost", reason="unrenewed", **run.ids)
    sim.line("C", "heartbeat", 6150, ok=True, sent_mono_ns=ns(5502), recv_mono_ns=ns(6150), **run.ids)
    sim.nemesis("unstall", 6140, "C")
    sim.call("C", "release", run.ids, 6151, True)
    h.rec_t4000.update(status="interrupted", error="superseded: slot 6000 started first")
    assert_clean(sim.check(), "timeout_enforced")


def test_timed_out_text_for_a_job_without_a_timeout(tmp_path: Path) -> None:
    """every1 has no timeout_ms, yet a run of it finished 'timed out after 1000 ms'."""
    sim, h = start(tmp_path)
    h.a_run_1000.finish.update(status="failed", failure=TIMED_OUT)
    assert_violates(sim.check(), "timeout_enforced", "its job has no timeout_ms")


def test_backup_running_beside_a_run_working_past_its_timeout(tmp_path: Path) -> None:
    """B takes timeout2@4000 over at 5600 while C, past its timeout, still works and renews:
    two runners at once (the grace ticks are the attempt's handler work)."""
    sim, _ = start(tmp_path)
    sim.won("B", "timeout2", 4000, 2, "b-t4000-2", 5600, reason="takeover")
    sim.timed_out("B", "timeout2", 4000, 2, "b-t4000-2", 5602, 6601, 6602, ignored=False)
    report = sim.check()
    assert_violates(report, "overlap_window", "timeout2@4000 #1 (C pid 103) ticked")
    assert_violates(report, "dead_runners_only", "timeout2@4000")


def test_backup_running_beside_a_later_try(tmp_path: Path) -> None:
    """A takes retry2@8000 over at 8250 while C's try 2 works on to 9200: the ticks of a try
    after the first are the attempt's handler work, and overlap the backup's."""
    sim, _ = start(tmp_path)
    sim.instance("D", 104, 7000)
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    sim.tried("C", "retry2", 8000, 1, "c-r8000", [(8002, 8100), (8202, 9200)])
    sim.won("D", "retry2", 8000, 2, "d-r8000-2", 8250, reason="takeover")
    sim.tried("D", "retry2", 8000, 2, "d-r8000-2", [(8252, 8600)], reason="takeover")
    sim.record("retry2", 8000, 2, "d-r8000-2", "D", "success")
    assert_violates(sim.check(), "overlap_window", "retry2@8000 #1 (C pid 103) ticked")


# -- tries_sequential ------------------------------------------------------------------------------


def exhausted(sim: Sim) -> SimpleNamespace:
    """C's retry2@8000: three tries raise (waits 202 and 202 ms); recorded failed with try 3's error."""
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    run = sim.tried("C", "retry2", 8000, 1, "c-r8000", [(8002, 8100), (8302, 8400), (8602, 8700)], last="raised")
    run.record = sim.record("retry2", 8000, 1, "c-r8000", "C", "failed", run.finish["failure"])
    return run


def test_tries_exhausted_pass(tmp_path: Path) -> None:
    """Three tries that all raise, then failed: nothing to report."""
    sim, _ = start(tmp_path)
    exhausted(sim)
    report = sim.check()
    assert report.ok, report.format_table()
    assert report.effects["retried_tries"] == 3


def test_try_numbers_with_a_gap(tmp_path: Path) -> None:
    """Try 2 logged as try 3."""
    sim, h = start(tmp_path)
    h.b_tries_6000.starts[1]["try_number"] = 3
    assert_violates(sim.check(), "tries_sequential", "tries began numbered [1, 3]")


def test_more_tries_than_retries_allow(tmp_path: Path) -> None:
    """Four tries of retry2 (retries 2)."""
    sim, _ = start(tmp_path)
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    sim.tried("C", "retry2", 8000, 1, "c-r8000", [(8002, 8050), (8152, 8200), (8402, 8450), (8852, 8900)])
    sim.record("retry2", 8000, 1, "c-r8000", "C", "success")
    assert_violates(sim.check(), "tries_sequential", "4 tries, with retries 2")


def test_backup_attempt_beginning_at_try_2(tmp_path: Path) -> None:
    """B's takeover of long2@2000 begins at try 2."""
    sim, h = start(tmp_path)
    h.b_run_2000.start["try_number"] = 2
    assert_violates(sim.check(), "tries_sequential", "(a backup begins at try 1)")


@pytest.mark.parametrize(
    "spans, text",
    [
        ([(6002, 6200), (6150, 6500)], "try 2 began before try 1 ended"),
        ([(6002, 6200), (6250, 6500)], "before its wait of 100 ms"),
        ([(6002, 6200), (6700, 6900)], "(wait 100..375 ms)"),
    ],
)
def test_tries_out_of_step(tmp_path: Path, spans: List[tuple], text: str) -> None:
    """Try 2 overlapping try 1, or begun too soon or too late after it raised."""
    sim, _ = start(tmp_path)
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    shifted = [(a + 2000, b + 2000) for a, b in spans]
    sim.tried("C", "retry2", 8000, 1, "c-r8000", shifted)
    sim.record("retry2", 8000, 1, "c-r8000", "C", "success")
    assert_violates(sim.check(), "tries_sequential", text)


def test_a_long_wait_of_a_frozen_process_is_no_violation(tmp_path: Path) -> None:
    """Try 2 began 500 ms after try 1 raised, but C was frozen in between."""
    sim, _ = start(tmp_path)
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    sim.tried("C", "retry2", 8000, 1, "c-r8000", [(8002, 8200), (8700, 8900)])
    sim.record("retry2", 8000, 1, "c-r8000", "C", "success")
    sim.nemesis("stop", 8250, "C")
    sim.nemesis("cont", 8650, "C")
    assert_clean(sim.check(), "tries_sequential")


@pytest.mark.parametrize("silent", [True, False])
def test_a_long_wait_of_a_starved_process_is_no_violation(tmp_path: Path, silent: bool) -> None:
    """Try 2 began 500 ms after try 1 raised while C's every1 handler ticked: when C logged no line
    at all for 320 ms meanwhile (starved of CPU), no violation; when it logged on, one."""
    sim, _ = start(tmp_path)
    sim.won("C", "every1", 8000, 1, "c-e8000", 8000)
    sim.run("C", "every1", 8000, 1, "c-e8000", 8001, 9000)
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    sim.tried("C", "retry2", 8000, 1, "c-r8000", [(8002, 8200), (8700, 8900)])
    sim.record("retry2", 8000, 1, "c-r8000", "C", "success")
    if silent:
        drop(sim, "C", [ln for ln in sim.logs["C"] if ns(8300) < ln["mono_ns"] < ns(8620)])
        assert_clean(sim.check(), "tries_sequential")
    else:
        assert_violates(sim.check(), "tries_sequential", "(wait 100..375 ms)")


def test_try_after_a_try_that_returned(tmp_path: Path) -> None:
    """Try 1 returned, yet try 2 followed."""
    sim, h = start(tmp_path)
    h.b_tries_6000.ends[0]["outcome"] = "returned"
    assert_violates(sim.check(), "tries_sequential", "which ended returned")


def test_try_without_a_retry_event(tmp_path: Path) -> None:
    """Try 2 began with no retry event for try 1."""
    sim, h = start(tmp_path)
    drop(sim, "B", h.b_tries_6000.retries)
    assert_violates(sim.check(), "tries_sequential", "without a retry event for try 1")


def test_try_after_the_run_was_aborted(tmp_path: Path) -> None:
    """The signal aborted (stop) while try 1 ran (6001), yet try 2 began at 6302: past the margin."""
    sim, h = start(tmp_path)
    sim.line("B", "abort", 6001, reason="stop", **h.b_tries_6000.ids)
    assert_violates(sim.check(), "tries_sequential", "after the run was aborted or lost")


def test_a_try_that_began_as_the_abort_landed_raced_it(tmp_path: Path) -> None:
    """The abort landed 52 ms before try 2's first line (the engine had read the signal just
    before): within the margin, a race of the two, not a try begun after the abort."""
    sim, h = start(tmp_path)
    sim.line("B", "abort", 6250, reason="stop", **h.b_tries_6000.ids)
    assert_clean(sim.check(), "tries_sequential")


def test_end_event_naming_another_try(tmp_path: Path) -> None:
    """The success event names try 1 although try 2 was the last."""
    sim, h = start(tmp_path)
    h.b_tries_6000.event["try_number"] = 1
    assert_violates(sim.check(), "tries_sequential", "success event names try 1")


# -- retry_outcome ---------------------------------------------------------------------------------


def test_success_whose_last_try_raised(tmp_path: Path) -> None:
    """retry2@6000 recorded success although its last try raised."""
    sim, h = start(tmp_path)
    h.b_tries_6000.ends[-1]["outcome"] = "raised"
    assert_violates(sim.check(), "retry_outcome", "recorded success, but its last try (2) ended raised")


def test_failed_before_the_tries_were_used_up(tmp_path: Path) -> None:
    """Recorded failed after two raising tries of three."""
    sim, _ = start(tmp_path)
    sim.won("C", "retry2", 8000, 1, "c-r8000", 8000)
    run = sim.tried("C", "retry2", 8000, 1, "c-r8000", [(8002, 8100), (8302, 8400)], last="raised")
    sim.record("retry2", 8000, 1, "c-r8000", "C", "failed", run.finish["failure"])
    assert_violates(sim.check(), "retry_outcome", "recorded failed after 2 tries of 3")


def test_failed_with_an_earlier_try_error(tmp_path: Path) -> None:
    """Exhausted, but recorded with try 1's error."""
    sim, _ = start(tmp_path)
    run = exhausted(sim)
    run.record["error"] = "RuntimeError: chaos: planned failure (try 1)"
    assert_violates(sim.check(), "retry_outcome", "with try 1's error, its last try was 3")


def test_failed_whose_last_try_returned(tmp_path: Path) -> None:
    """Exhausted, recorded failed, but its last try's end says returned."""
    sim, _ = start(tmp_path)
    run = exhausted(sim)
    run.ends[-1]["outcome"] = "returned"
    assert_violates(sim.check(), "retry_outcome", "but its last try (3) returned")
