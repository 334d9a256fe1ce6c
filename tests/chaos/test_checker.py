"""The chaos checker's specification: small synthetic logs (:mod:`tests.chaos.sim`), no processes.

:func:`~tests.chaos.sim.clean_run` passes; each other test breaks one thing and expects the
invariant that names it to report a violation (``test_checker_controls.py``: the checks of
pause, resume, trigger and the stored attempts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from chaoslib.checker import Config, Report, check

from .sim import HB, LEASE, Sim, assert_skipped, clean_run, ns, resume_later, start
from .sim_schedules import answer

pytestmark = pytest.mark.timeout(30)


def violations(report: Report, name: str) -> List[str]:
    """The violations of one invariant (the report's table on failure)."""
    return report.invariants[name].violations


def assert_violates(report: Report, name: str) -> None:
    """Fail unless ``name`` reports a violation."""
    assert violations(report, name), f"{name} reported no violation\n{report.format_table()}"


# -- the clean run -----------------------------------------------------------------------------


def test_clean_run_passes_with_every_invariant_checked(tmp_path: Path) -> None:
    """The clean run has no violation, every invariant checked at least once, and effective faults."""
    sim, _ = start(tmp_path)
    report = sim.check()
    assert report.ok, report.format_table()
    unchecked = [inv.name for inv in report.invariants.values() if inv.checked == 0]
    assert unchecked == [], report.format_table()
    assert report.effective, report.format_table()
    assert report.effects["takeovers"] == 4 and report.effects["refused_heartbeats"] == 1
    assert report.effects["refused_late_claims"] == 1 and report.effects["kills"] == 1
    assert report.end_states["completed"] == 13 and report.end_states["skipped while paused"] == 1
    assert report.end_states["skipped as rescheduled"] == 1 and report.effects["stale_claims"] == 2
    assert report.effects["schedule_changes"] == 4 and report.effects["stored_job_runs"] == 2
    assert report.effects["rescheduled_skips"] == 2 and report.effects["stored_due_slots"] == 2
    assert report.effects["paused_claims"] == 1 and report.effects["manual_runs"] == 1
    assert report.end_states["skipped as overlap"] == 1 and report.end_states["refused late"] == 1
    assert report.takeover.samples == [pytest.approx(1952)]
    assert report.handover.samples == [pytest.approx(502)]


def test_table_shows_counts_delays_and_verdict(tmp_path: Path) -> None:
    """format_table lists every invariant, the delay percentiles, the margin and the verdict."""
    sim, _ = start(tmp_path)
    table = sim.check().format_table()
    for text in ("tokens_unique", "handover_delay", "p50=", "p99=", "max=", "scheduling margin 250 ms", "verdict: OK"):
        assert text in table, table


# -- one violation each ------------------------------------------------------------------------


def test_duplicate_token(tmp_path: Path) -> None:
    """Two attempts won with the same token."""
    sim, h = start(tmp_path)
    h.c_won_8000["token"] = "b-8000"
    assert_violates(sim.check(), "tokens_unique")


def test_attempt_gap(tmp_path: Path) -> None:
    """Attempt 3 won after attempt 1, with no SIGKILL to explain an unlogged attempt 2."""
    sim, h = start(tmp_path)
    h.c_won_8000["attempt"] = 3
    assert_violates(sim.check(), "attempts_sequential")


def _gap_after_an_unanswered_claim(tmp_path: Path, reason: str, sent: float, error: str) -> Report:
    """C's claim of long2@8000 (``reason``) sent at ``sent`` got no answer at 10000; the store
    carried out a claim all the same: C's logged takeover is attempt 3 there, attempt 2 unlogged."""
    sim, _ = start(tmp_path)
    sim.line("C", "claim", 10000, job="long2", slot_ms=8000, reason=reason, outcome=None,
             error=error, t0_mono_ns=ns(sent), t1_mono_ns=ns(10000))  # fmt: skip
    next(r for r in sim.records["long2"] if r["slot_ms"] == 8000).update(attempt=3)
    for line in sim.logs["C"] + sim.logs["B"]:  # C's logged takeover was attempt 3 in the store
        if line.get("token") == "c-8000-2":
            line["attempt"] = 3
    return sim.check()


def test_gap_after_an_unanswered_claim_is_skipped(tmp_path: Path) -> None:
    """A takeover claim timed out, yet the store carried it out: the gap it leaves is skipped, not a violation."""
    report = _gap_after_an_unanswered_claim(tmp_path, "takeover", 9500, "StoreUnavailable: timed out")
    assert_skipped(report, "attempts_sequential")


def test_gap_after_an_unanswered_claim_sent_before_the_win_it_follows_is_skipped(tmp_path: Path) -> None:
    """C's scheduled claim, sent before B's claim of attempt 1 was answered, got no answer; the
    server ran it later (it waited for its standby) and took the run over as attempt 2: the gap
    is skipped, not a violation."""
    report = _gap_after_an_unanswered_claim(tmp_path, "schedule", 7999, "StoreUnavailable: no answer within 2 s")
    assert_skipped(report, "attempts_sequential")


def test_record_with_an_older_token(tmp_path: Path) -> None:
    """The store's record holds attempt 1's token although attempt 2 was won."""
    sim, _ = start(tmp_path)
    rec = next(r for r in sim.records["long2"] if r["slot_ms"] == 8000)
    rec.update(attempt=1, token="b-8000")
    assert_violates(sim.check(), "record_last_token")


def test_two_accepted_finishes(tmp_path: Path) -> None:
    """The resumed older attempt's finish is accepted too."""
    sim, _ = start(tmp_path)
    b8 = {"job": "long2", "slot_ms": 8000, "attempt": 1, "token": "b-8000"}
    sim.call("B", "finish", b8, 10305, True, status="success")
    report = sim.check()
    assert_violates(report, "one_finish")
    assert_violates(report, "fencing")


def test_older_token_heartbeat_accepted(tmp_path: Path) -> None:
    """A heartbeat with the older token, sent after the newer attempt was won, is accepted."""
    sim, h = start(tmp_path)
    h.b_refused["ok"] = True
    assert_violates(sim.check(), "fencing")


def test_overlap_too_long(tmp_path: Path) -> None:
    """The resumed older attempt ticks 700 ms beside the newer one."""
    sim, _ = start(tmp_path)
    sim.ticks("B", {"job": "long2", "slot_ms": 8000, "attempt": 1, "token": "b-8000"}, 10311, 11000)
    assert_violates(sim.check(), "overlap_window")


def test_frozen_time_is_not_overlap(tmp_path: Path) -> None:
    """Ticks before SIGSTOP and one tick after SIGCONT are no overlap, however long the freeze."""
    sim, _ = start(tmp_path)
    report = sim.check()
    assert report.invariants["overlap_window"].checked >= 3 and not violations(report, "overlap_window")


def test_missing_lost(tmp_path: Path) -> None:
    """The resumed older attempt never logs lost."""
    sim, h = start(tmp_path)
    sim.logs["B"].remove(h.b_lost)
    assert_violates(sim.check(), "lost_in_time")


def test_lost_too_late(tmp_path: Path) -> None:
    """The resumed older attempt logs lost 700 ms after SIGCONT."""
    sim, h = start(tmp_path)
    h.b_lost["mono_ns"] = ns(11000)
    assert_violates(sim.check(), "lost_in_time")


def test_resumed_process_may_log_before_the_cont_line(tmp_path: Path) -> None:
    """The nemesis logs ``cont`` after sending SIGCONT: a tick logged just before that line is after the resume."""
    sim, h = start(tmp_path)
    resume_later(h, 500)
    h.b_cont["mono_ns"] = ns(10802)  # logged after B's first tick (10801) and its heartbeat (sent 10801)
    report = sim.check()
    assert report.ok, report.format_table()


def test_no_lost_required_from_a_process_killed_right_after_sigcont(tmp_path: Path) -> None:
    """SIGCONT then SIGKILL 3 ms later: the older attempt had no time to log lost; counted as skipped."""
    sim, h = start(tmp_path)
    sim.logs["B"].remove(h.b_lost)
    sim.nemesis("kill", 10303, "B")  # (B's later lines stay: only this slot's lost matters here)
    assert_skipped(sim.check(), "lost_in_time")


def x_runs_long2(sim: Sim, ticks_until: float) -> Dict[str, Any]:
    """X, the only instance, wins long2@2000, starts it, ticks until ``ticks_until`` and renews at 2500; its ids."""
    sim.instance("X", 201)
    ids = {"job": "long2", "slot_ms": 2000, "attempt": 1, "token": "x"}
    sim.won("X", "long2", 2000, 1, "x", 2000)
    sim.line("X", "start", 2002, reason="schedule", **ids)
    sim.ticks("X", ids, 2003, ticks_until)
    sim.call("X", "heartbeat", ids, 2500, True)
    return ids


def test_partitioned_runner_runs_past_its_local_deadline(tmp_path: Path) -> None:
    """Heartbeats fail (no pause), yet the handler ticks and logs lost long after renewal + lease."""
    sim = Sim(tmp_path)
    ids = x_runs_long2(sim, ticks_until=5000)
    for t in (3000, 3600, 4200):
        sim.call("X", "heartbeat", ids, t, None, error="StoreUnavailable: timed out")
    sim.line("X", "event", 5001, type="lost", error="not renewed", **ids)
    sim.record("long2", 2000, 1, "x", "X", "running")
    report = sim.check()
    assert_violates(report, "local_deadline")
    assert any("past its local deadline" in v for v in violations(report, "local_deadline"))


def test_late_lost_after_the_handler_ended_in_time_is_no_violation(tmp_path: Path) -> None:
    """The handler ended before its deadline; its finish hung in a stall and lost came late: nothing to abort."""
    sim = Sim(tmp_path)
    ids = x_runs_long2(sim, ticks_until=3000)
    sim.line("X", "end", 3001, outcome="returned", **ids)
    sim.line("X", "finish", 4002, ok=None, error="timeout", sent_mono_ns=ns(3002), recv_mono_ns=ns(4002), **ids)
    sim.line("X", "event", 5000, type="lost", error="not renewed", **ids)  # deadline 4500
    sim.record("long2", 2000, 1, "x", "X", "running")
    report = sim.check()
    assert report.ok, report.format_table()
    assert report.invariants["local_deadline"].checked == 1


def test_takeover_too_slow(tmp_path: Path) -> None:
    """After SIGKILL the next attempt starts 3.5 s later, with a backup available all along."""
    sim, h = start(tmp_path)
    h.b_run_2000.start["mono_ns"] = ns(6600)
    report = sim.check()
    assert_violates(report, "takeover_delay")
    assert report.takeover.max == pytest.approx(3500)


def test_slow_takeover_during_a_store_restart_is_excused(tmp_path: Path) -> None:
    """The same slow takeover, while the store restarted, is counted as excused, not as a violation."""
    sim, h = start(tmp_path)
    h.b_run_2000.start["mono_ns"] = ns(6600)
    sim.nemesis("store-restart", 3500, duration_ms=1500, how="kill")
    report = sim.check()
    assert not violations(report, "takeover_delay"), report.format_table()
    assert report.takeover.excused == 1


def test_resume_without_a_cont_line(tmp_path: Path) -> None:
    """A frozen process whose SIGCONT was never logged counts as resumed at its next line."""
    sim, h = start(tmp_path)
    resume_later(h, 500)
    sim.logs["nemesis"].remove(h.b_cont)
    report = sim.check()
    assert report.ok, report.format_table()


def test_handover_too_slow(tmp_path: Path) -> None:
    """After SIGTERM and a release, the backup starts 1.4 s later."""
    sim, h = start(tmp_path)
    h.b_run_12000.start["mono_ns"] = ns(13600)
    assert_violates(sim.check(), "handover_delay")


def test_slot_without_an_end_state(tmp_path: Path) -> None:
    """A slot answered only 'early', and a record interrupted for no known reason."""
    sim, _ = start(tmp_path)
    sim.claim("B", "every1", 20000, 13500, "early")
    sim.record("skip3", 9000, 1, "z", "B", "interrupted", "who knows")
    report = sim.check()
    found = violations(report, "end_state")
    assert len(found) == 2, report.format_table()


def test_won_slot_without_a_record(tmp_path: Path) -> None:
    """The store forgot a slot that was won."""
    sim, _ = start(tmp_path)
    sim.records["every1"] = [r for r in sim.records["every1"] if r["slot_ms"] != 1000]
    report = sim.check()
    assert_violates(report, "end_state")
    assert_violates(report, "record_last_token")


def x_runs_y_backs_up(sim: Sim, job: str, slot: int, ended: float, **run: Any) -> None:
    """Instances X and Y: X wins ``job``@``slot`` (token x) and runs it until ``ended``; Y's claim finds it running."""
    sim.instance("X", 201)
    sim.instance("Y", 202)
    sim.won("X", job, slot, 1, "x", slot)
    sim.claim("Y", job, slot, slot, "running", attempt=1, token="x")
    sim.run("X", job, slot, 1, "x", slot + 2, ended, **run)


def test_run_left_running_with_instances_available(tmp_path: Path) -> None:
    """A run whose runner ended it stays 'running' while another instance ran for long after."""
    sim = Sim(tmp_path)
    x_runs_y_backs_up(sim, "long2", 2000, 2500, outcome="open")
    sim.line("X", "end", 2500, outcome="returned", job="long2", slot_ms=2000, attempt=1, token="x")
    sim.record("long2", 2000, 1, "x", "X", "running")
    sim.line("X", "stopped", 20000, code=0)
    sim.line("Y", "stopped", 20000, code=0)
    report = sim.check()
    assert any("still running" in v for v in violations(report, "end_state")), report.format_table()


def assert_stuck_unless_deleted(sim: Sim, deleted: bool, stopped: Tuple[str, ...]) -> None:
    """stored1@2000 recorded running for X (token x); with ``deleted`` the job is deleted at 2999;
    the ``stopped`` instances stop at 20000. The run is reported 'still running' unless deleted."""
    sim.record("stored1", 2000, 1, "x", "X", "running")
    if deleted:
        sim.operator("delete", "stored1", 2999, **answer(2, 3000, "code"))
    for runner in stopped:
        sim.line(runner, "stopped", 20000, code=0)
    report = sim.check()
    stuck = any("still running" in v for v in violations(report, "end_state"))
    assert stuck is not deleted, report.format_table()


@pytest.mark.parametrize("deleted", [False, True])
def test_a_run_of_a_job_deleted_before_its_takeover_stays_running(tmp_path: Path, deleted: bool) -> None:
    """A stored job's run whose runner ended it stays 'running': a violation, unless the job was
    deleted between the run's start and its takeover's due time (a deleted job's backups end)."""
    sim = Sim(tmp_path)
    x_runs_y_backs_up(sim, "stored1", 2000, 2500, outcome="open")
    sim.line("X", "end", 2500, outcome="returned", job="stored1", slot_ms=2000, attempt=1, token="x")
    assert_stuck_unless_deleted(sim, deleted, ("X", "Y"))


@pytest.mark.parametrize("deleted", [False, True])
def test_an_unconfirmed_run_of_a_job_deleted_meanwhile_stays_running(tmp_path: Path, deleted: bool) -> None:
    """stored1@2000 is recorded running for X, whose claims got no answer (the replicas did not
    confirm the write; it sent the claim again with its token) and who never started it; Y was
    answered running. A violation, unless the job was deleted while X was still claiming it:
    nobody started that run, and a deleted job's backups end."""
    sim = Sim(tmp_path)
    for runner, pid in (("X", 201), ("Y", 202), ("Z", 203)):
        sim.instance(runner, pid)
    sim.claim("X", "stored1", 2000, 2000, None)
    sim.claim("Y", "stored1", 2000, 2010, "running", attempt=1, token="x")
    sim.claim("X", "stored1", 2000, 2600, None)
    sim.nemesis("kill", 4000, "Z")  # after the delete: the last kill is no start of the run
    assert_stuck_unless_deleted(sim, deleted, ("X", "Y"))


@pytest.mark.parametrize("deleted", [False, True])
def test_a_run_whose_claimant_was_killed_before_the_answer_of_a_deleted_job_stays_running(
    tmp_path: Path, deleted: bool
) -> None:
    """stored1@2000 is recorded running for X, killed before it logged its claim's answer; Y was
    answered running. A violation, unless the job was deleted between the claims and X's kill's
    takeover time: a deleted job's backups end (a later kill of another instance changes nothing)."""
    sim = Sim(tmp_path)
    for runner, pid in (("X", 201), ("Y", 202), ("Z", 203)):
        sim.instance(runner, pid)
    sim.claim("Y", "stored1", 2000, 2010, "running", attempt=1, token="x")
    sim.nemesis("kill", 2300, "X")
    sim.nemesis("kill", 4000, "Z")
    assert_stuck_unless_deleted(sim, deleted, ("Y",))


def test_run_live_at_the_end_is_no_violation(tmp_path: Path) -> None:
    """A run still running when the logs end is counted as 'running at end'."""
    sim = Sim(tmp_path)
    sim.instance("X", 201)
    sim.won("X", "long2", 2000, 1, "x", 2000)
    sim.run("X", "long2", 2000, 1, "x", 2002, 3000, outcome="open")
    sim.record("long2", 2000, 1, "x", "X", "running")
    report = sim.check()
    assert report.ok, report.format_table()
    assert report.end_states["running at end"] == 1


def test_attempt_after_a_raising_handler(tmp_path: Path) -> None:
    """A slot whose handler raised (recorded failed) is won again."""
    sim, _ = start(tmp_path)
    sim.won("B", "every1", 13000, 2, "b-13000-2", 13500, reason="takeover")
    report = sim.check()
    assert_violates(report, "failed_not_retried")
    assert_violates(report, "dead_runners_only")


def test_attempt_after_a_live_runner(tmp_path: Path) -> None:
    """Without the SIGKILL, the takeover followed a runner that was alive and renewing."""
    sim, h = start(tmp_path)
    sim.logs["nemesis"].remove(h.kill_a)
    assert_violates(sim.check(), "dead_runners_only")


def test_too_many_attempts(tmp_path: Path) -> None:
    """Four attempts, each after a SIGKILL, with max_attempts 3."""
    sim = Sim(tmp_path)
    for i, name in enumerate("WXYZ"):
        sim.instance(name, 300 + i)
    for i, name in enumerate("WXYZ"):
        at = 2000 + i * 3000
        sim.won(name, "long2", 2000, i + 1, f"t{i}", at, reason="takeover" if i else "schedule")
        sim.run(name, "long2", 2000, i + 1, f"t{i}", at + 2, at + 500, outcome="open" if i < 3 else "returned")
        if i < 3:
            sim.nemesis("kill", at + 500, name)
    sim.record("long2", 2000, 4, "t3", "Z", "success")
    assert_violates(sim.check(), "max_attempts")


def test_skip_won_while_an_earlier_lease_lived(tmp_path: Path) -> None:
    """skip3@6000 is won while skip3@3000 renewed its lease 500 ms before."""
    sim, h = start(tmp_path)
    h.b_claim_6000.update(outcome="won", token="b-6000", run_slot_ms=6000)
    sim.record("skip3", 6000, 1, "b-6000", "B", "success")
    sim.sink_rows = None
    report = sim.check()
    assert_violates(report, "skip_no_overlap")
    assert "skip3@6000" in violations(report, "skip_no_overlap")[0]


def skip_after_unanswered_finish(sim: Sim, earlier_status: str) -> Report:
    """X's every1@1000 finish times out (its retry is refused); Y wins every1@2000 while X's lease would run."""
    sim.instance("X", 201)
    sim.instance("Y", 202)
    ids = {"job": "every1", "slot_ms": 1000, "attempt": 1, "token": "x"}
    sim.won("X", "every1", 1000, 1, "x", 1000)
    sim.run("X", "every1", 1000, 1, "x", 1002, 1300, outcome="open")
    sim.line("X", "end", 1300, outcome="returned", **ids)
    sim.line("X", "finish", 2301, ok=None, error="timeout", sent_mono_ns=ns(1301), recv_mono_ns=ns(2301), **ids)
    sim.call("X", "finish", ids, 2310, False, status="success")
    sim.record("every1", 1000, 1, "x", "X", earlier_status)
    sim.won("Y", "every1", 2000, 1, "y", 2000)
    sim.run("Y", "every1", 2000, 1, "y", 2002, 2200)
    sim.record("every1", 2000, 1, "y", "Y", "success")
    return sim.check()


def test_skip_after_an_unanswered_finish_that_landed(tmp_path: Path) -> None:
    """The unanswered finish landed (the record says success): the later win is no overlap."""
    report = skip_after_unanswered_finish(Sim(tmp_path), "success")
    assert report.ok, report.format_table()
    assert report.invariants["skip_no_overlap"].checked == 2


def test_skip_after_an_unanswered_finish_that_did_not_land(tmp_path: Path) -> None:
    """The record shows the earlier attempt still running: its finish never landed, the win overlapped."""
    assert_violates(skip_after_unanswered_finish(Sim(tmp_path), "running"), "skip_no_overlap")


def test_run_started_too_late(tmp_path: Path) -> None:
    """A claim sent 41 s after its slot (by the wall clock) won a new run."""
    sim, h = start(tmp_path)
    h.a_won_1000["wall_ns"] = ns(1001 + 41_000)
    assert_violates(sim.check(), "not_late")


def test_sink_refused_without_a_newer_writer(tmp_path: Path) -> None:
    """The sink refused a write although no newer attempt of the slot wrote."""
    sim, _ = start(tmp_path)
    sim.line("A", "sink", 1150, accepted=False, job="every1", slot_ms=1000, attempt=1, token="a-1000")
    assert_violates(sim.check(), "sink_newest")


def test_sink_holding_an_older_token(tmp_path: Path) -> None:
    """The sink holds attempt 1's result for a slot completed by attempt 2."""
    sim, _ = start(tmp_path)
    assert sim.sink_rows is not None
    sim.sink_rows[("long2", 8000)] = (1, "b-8000")
    assert_violates(sim.check(), "sink_newest")


# -- effectiveness -----------------------------------------------------------------------------


def test_run_without_faults_proved_nothing(tmp_path: Path) -> None:
    """A quiet run passes but says it proved nothing."""
    sim = Sim(tmp_path)
    x_runs_y_backs_up(sim, "every1", 1000, 1300)
    sim.record("every1", 1000, 1, "x", "X", "success")
    report = sim.check()
    assert report.ok, report.format_table()
    assert not report.effective
    assert set(report.missing_effects) == {
        "takeovers", "refused_heartbeats", "refused_late_claims", "paused_claims", "manual_runs", "timeouts",
        "timeouts_ignored", "retried_tries", "stale_claims", "stored_job_runs",
    }  # fmt: skip
    assert "proved nothing" in report.format_table()


def test_malformed_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    """A torn last line (a SIGKILL mid-write) is ignored and noted."""
    sim, _ = start(tmp_path)
    report_dir = sim.dir
    sim.check()
    with open(report_dir / "A.jsonl", "a") as f:
        f.write('{"ev": "tick", "runner": "A", "mono')
    report = check(report_dir, sim.records, Config(lease_ms=LEASE, heartbeat_ms=HB))
    assert report.ok, report.format_table()
    assert any("malformed" in n for n in report.notes)


# -- faults that excuse, and clocks --------------------------------------------------------------


def test_overlap_while_a_network_fault_held_the_heartbeat_up_is_excused(tmp_path: Path) -> None:
    """The same too-long overlap, while B's proxy added latency: excused (skipped), not passed."""
    sim, _ = start(tmp_path)
    sim.ticks("B", {"job": "long2", "slot_ms": 8000, "attempt": 1, "token": "b-8000"}, 10311, 11000)
    sim.nemesis("latency", 10250, "B", ms=300)
    sim.nemesis("latency", 11050, "B", ms=0)
    report = sim.check()
    assert not violations(report, "overlap_window"), report.format_table()
    assert report.invariants["overlap_window"].skipped >= 1


def test_round_trip_bound_ignores_heartbeats_a_fault_touched(tmp_path: Path) -> None:
    """A heartbeat held up 900 ms by a stall of its runner does not widen the bounds."""
    sim, _ = start(tmp_path)
    ids = {"job": "every1", "slot_ms": 13000, "attempt": 1, "token": "b-13000"}
    sim.nemesis("stall", 13050, "B")
    sim.line("B", "heartbeat", 13960, ok=True, sent_mono_ns=ns(13060), recv_mono_ns=ns(13960), **ids)
    sim.nemesis("unstall", 13950, "B")
    report = sim.check()
    assert report.rtt_p99_ms < 10, report.rtt_p99_ms


def test_claim_answered_early(tmp_path: Path) -> None:
    """A claim answered early (an instance that fired by its own clock, 25 s ahead)."""
    sim, _ = start(tmp_path)
    sim.claim("A", "every1", 30_000, 5_000, "early")
    assert_violates(sim.check(), "not_early")


def test_claim_answered_early_while_the_store_clock_was_stepped_back_is_excused(tmp_path: Path) -> None:
    """The same early answer while the store's clock was stepped back: excused."""
    sim, _ = start(tmp_path)
    sim.nemesis("clock-step", 4_900, offset_ms=-12_000)
    sim.claim("A", "every1", 30_000, 5_000, "early")
    sim.nemesis("clock-back", 5_500, offset_ms=0)
    assert_skipped(sim.check(), "not_early")


def test_scheduled_claim_sent_before_its_slot(tmp_path: Path) -> None:
    """A scheduled claim sent 3 s before its slot by the true clock (an instance firing by a
    skewed clock of its own, within the store's 10 s tolerance for early claims)."""
    sim, _ = start(tmp_path)
    sim.claim("A", "every1", 9_000, 6_000, "running", attempt=1, token="x")
    report = sim.check()
    assert_violates(report, "on_time")
    assert "-3000 ms" in violations(report, "on_time")[0]


def test_scheduled_claim_sent_late_by_a_frozen_process_is_excused(tmp_path: Path) -> None:
    """B's claim of every1@9000, sent 1.3 s late right after its freeze, is late for a reason: excused."""
    sim, _ = start(tmp_path)
    sim.claim("B", "every1", 9_000, 10_305, "late")
    report = sim.check()
    assert not violations(report, "on_time") and report.invariants["on_time"].skipped >= 1


def answered_at(line: Dict[str, Any], at: float) -> None:
    """Make a claim or call line answered, and logged, at ``at`` ms (its send time unchanged)."""
    key = "t1_mono_ns" if "t1_mono_ns" in line else "recv_mono_ns"
    line.update({key: ns(at), "mono_ns": ns(at), "wall_ns": ns(at)})


def claims_behind_a_frozen_writer(sim: Sim, freeze: bool = True, holds_lock: bool = True) -> None:
    """After the clean run, the shape of a chaos smoke failure on SQLite (seed 101): D is frozen
    12 s (``freeze``) in the middle of its finish of every1@20000 (``holds_lock``: sent before
    the SIGSTOP, answered after the SIGCONT), so it holds the file's write lock throughout and
    nobody else writes. E's claim of every1@21000 gives up after its 1 s busy timeout, and E's
    claims of every1@22000 and long2@22000 are sent 11 s late, the moment D is continued; so is
    its takeover of long2@20000, whose runner F was killed at 20600."""
    sim.instance("D", 104, 19_000)
    sim.instance("E", 105, 19_000)
    sim.instance("F", 106, 19_000)
    sim.won("F", "long2", 20_000, 1, "f-20000", 20_000)
    sim.claim("E", "long2", 20_000, 20_000, "running", attempt=1, token="f-20000")
    sim.run("F", "long2", 20_000, 1, "f-20000", 20_002, 20_600, outcome="open")
    sim.nemesis("kill", 20_600, "F")
    sim.won("D", "every1", 20_000, 1, "d-20000", 20_000)
    sim.claim("E", "every1", 20_000, 20_000, "running", attempt=1, token="d-20000")
    d = sim.run("D", "every1", 20_000, 1, "d-20000", 20_002, 20_990)
    sim.record("every1", 20_000, 1, "d-20000", "D", "success")
    if holds_lock:
        answered_at(d.finish, 33_001)
        answered_at(sim.logs["D"][-1], 33_003)  # its success event
    if freeze:
        sim.nemesis("stop", 21_000, "D", duration_ms=12_000)
        sim.nemesis("cont", 33_000, "D")
    busy = sim.claim("E", "every1", 21_000, 21_000, None)
    busy["error"] = "StoreUnavailable: SQLite cannot begin a write transaction: the write lock stayed busy for 1000 ms"
    answered_at(busy, 22_001)
    for job, at in (("every1", 33_002), ("long2", 33_003)):
        token = f"e-{job}-22000"
        sim.won("E", job, 22_000, 1, token, at)
        sim.run("E", job, 22_000, 1, token, at + 2, at + 300)
        sim.record(job, 22_000, 1, token, "E", "success")
    sim.won("E", "long2", 20_000, 2, "e-20000-2", 33_004, reason="takeover")
    sim.run("E", "long2", 20_000, 2, "e-20000-2", 33_006, 33_300, reason="takeover")
    sim.record("long2", 20_000, 2, "e-20000-2", "E", "success")
    sim.claim("D", "every1", 33_000, 33_005, "overlap", attempt=1, token="e-every1-22000", run_slot=22_000)
    sim.sink_from_records()


def test_claims_held_up_by_an_instance_frozen_holding_the_sqlite_write_lock_are_excused(tmp_path: Path) -> None:
    """On SQLite, an instance frozen inside a write holds the file's write lock: E's claims, sent
    11 s late behind it, were held up by the store, and are excused (skipped) as a store fault's."""
    sim, _ = start(tmp_path)
    claims_behind_a_frozen_writer(sim)
    report = sim.check()
    assert report.ok, report.format_table()
    assert report.invariants["on_time"].skipped >= 2
    assert report.takeover.excused == 1
    assert report.effects["frozen_writers"] == 1


def test_the_same_late_claims_without_a_freeze_are_violations(tmp_path: Path) -> None:
    """The same claims 11 s late, and the same takeover 12.4 s after the SIGKILL, with no instance
    frozen: nothing held them up."""
    sim, _ = start(tmp_path)
    claims_behind_a_frozen_writer(sim, freeze=False, holds_lock=False)
    report = sim.check()
    assert len(violations(report, "on_time")) == 2, report.format_table()
    assert_violates(report, "takeover_delay")
    assert "+11002 ms" in violations(report, "on_time")[0]


def test_a_frozen_instance_that_held_no_write_lock_excuses_no_one_else(tmp_path: Path) -> None:
    """D frozen 12 s between two writes (its finish answered before the SIGSTOP) holds no lock:
    E's late claims and late takeover are violations."""
    sim, _ = start(tmp_path)
    claims_behind_a_frozen_writer(sim, holds_lock=False)
    report = sim.check()
    assert len(violations(report, "on_time")) == 2, report.format_table()
    assert_violates(report, "takeover_delay")
    assert report.effects["frozen_writers"] == 0


def test_a_frozen_instance_inside_a_write_while_another_wrote_held_no_lock(tmp_path: Path) -> None:
    """D frozen inside its finish, but E won skip3@21000 and renewed it meanwhile: the lock was
    free then, so D was waiting for it, not holding it (a frozen process takes and gives up
    nothing): E's late claims are violations."""
    sim, _ = start(tmp_path)
    claims_behind_a_frozen_writer(sim)
    sim.won("E", "skip3", 21_000, 1, "e-21000", 21_000)
    sim.run("E", "skip3", 21_000, 1, "e-21000", 21_002, 21_900)
    sim.record("skip3", 21_000, 1, "e-21000", "E", "success")
    sim.sink_from_records()
    report = sim.check()
    assert report.effects["frozen_writers"] == 0
    assert len(violations(report, "on_time")) == 2, report.format_table()


@pytest.mark.parametrize("store", ["redis", "valkey", "postgresql"])
def test_on_a_server_store_a_frozen_instance_excuses_no_one_else(tmp_path: Path, store: str) -> None:
    """On a server store a frozen instance holds no lock over the others, even inside a call."""
    sim = Sim(tmp_path, store=store)
    clean_run(sim)
    claims_behind_a_frozen_writer(sim)
    report = sim.check()
    assert len(violations(report, "on_time")) == 2, report.format_table()


@pytest.mark.parametrize("fault", ["store-restart", "frozen writer"])
def test_a_frozen_sqlite_writer_excuses_no_overlap(tmp_path: Path, fault: str) -> None:
    """B ticks 700 ms beside C's attempt after its SIGCONT. A store restart then excuses it (B's
    refused heartbeat may have been held up); D frozen inside a write does not: a frozen writer
    only delays the others' writes, and B stops by its local deadline whatever the store does."""
    sim, _ = start(tmp_path)
    sim.ticks("B", {"job": "long2", "slot_ms": 8000, "attempt": 1, "token": "b-8000"}, 10311, 11000)
    if fault == "store-restart":
        sim.nemesis("store-restart", 10_150, how="sqlite-lock", duration_ms=140)
    else:
        sim.instance("D", 104, 9_000)
        check = sim.claim("D", "long2", 8_000, 10_149, "running", "takeover", attempt=2, token="c-8000-2")
        sim.nemesis("stop", 10_150, "D", duration_ms=140)
        sim.nemesis("cont", 10_290, "D")
        answered_at(check, 10_291)
    report = sim.check()
    if fault == "store-restart":
        assert not violations(report, "overlap_window"), report.format_table()
    else:
        assert report.effects["frozen_writers"] == 1
        assert_violates(report, "overlap_window")


def test_skip_win_while_the_store_clock_was_stepped_forward_is_excused(tmp_path: Path) -> None:
    """skip3@6000 won while skip3@3000's lease lived by the monotonic clock, but the store's
    clock had jumped forward: the store judged the lease on its own clock, excused."""
    sim, h = start(tmp_path)
    h.b_claim_6000.update(outcome="won", token="b-6000", run_slot_ms=6000)
    sim.record("skip3", 6000, 1, "b-6000", "B", "success")
    sim.sink_rows = None
    sim.nemesis("clock-step", 5_900, offset_ms=3_000)
    sim.nemesis("clock-back", 7_000, offset_ms=0)
    report = sim.check()
    assert not violations(report, "skip_no_overlap"), report.format_table()
    assert report.invariants["skip_no_overlap"].skipped >= 1


def test_a_final_sink_write_that_failed_is_skipped_not_blamed(tmp_path: Path) -> None:
    """The final attempt of every1@12000 logged its sink write as failed (the sink stayed locked):
    the sink holding nothing for it is not a violation, and is counted as skipped."""
    sim, h = start(tmp_path)
    h.b_run_12000.sink.update(accepted=None, error="OperationalError: database is locked")
    assert sim.sink_rows is not None
    del sim.sink_rows[("every1", 12000)]
    report = sim.check()
    assert not violations(report, "sink_newest"), report.format_table()
    assert report.invariants["sink_newest"].skipped >= 1


def test_a_final_sink_write_that_is_missing_is_blamed(tmp_path: Path) -> None:
    """The same slot with its write logged as accepted but missing from the sink: a violation."""
    sim, _ = start(tmp_path)
    assert sim.sink_rows is not None
    del sim.sink_rows[("every1", 12000)]
    assert_violates(sim.check(), "sink_newest")
