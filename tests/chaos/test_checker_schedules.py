"""The chaos checker on schedules as data: synthetic logs, no processes.

Each test starts from :func:`~tests.chaos.sim.clean_run`, whose schedule part
(:mod:`tests.chaos.sim_schedules`) reschedules timeout2 to every 4 s at 6900 (version 1) and
resets it at 9500, and puts stored1 (every 1 s) at 3400 and deletes it at 8000 (B runs
stored1@5000, C stored1@6000). It breaks one thing and expects ``rescheduled_fenced`` or
``stored_once`` to report it, or adds something allowed and expects nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .sim import Sim, assert_clean, assert_violates, ns, start
from .sim_schedules import PUT, answer, ran, versioned

pytestmark = pytest.mark.timeout(30)


def drop_slot(sim: Sim, job: str, slot: int) -> None:
    """Remove every line and the record of ``job@slot``: nobody ever claimed it."""
    for name, lines in sim.logs.items():
        sim.logs[name] = [ln for ln in lines if not (ln.get("job") == job and ln.get("slot_ms") == slot)]
    sim.records[job] = [r for r in sim.records[job] if r["slot_ms"] != slot]


# -- rescheduled_fenced ----------------------------------------------------------------------------


def test_a_run_from_the_replaced_version_started_after_the_change(tmp_path: Path) -> None:
    """C's claim of timeout2@8000 carries version 0, the code's, and starts a run at 8000 on the
    store's clock: after the reschedule stored at 6900 (version 1)."""
    sim, h = start(tmp_path)
    h.c_won_t8000["version"] = 0
    assert_violates(sim.check(), "rescheduled_fenced", "from version 0, after the reschedule v1 (4) stored at 6900")


def test_a_deleted_job_run_from_its_last_put_after_the_delete(tmp_path: Path) -> None:
    """C's claim of stored1@9000 from version 1 wins, the run started at 9000: after the delete (8000)."""
    sim, h = start(tmp_path)
    h.c_stale_s9000.update(outcome="won", attempt=1, token="c-s9000", run_slot_ms=9000, run_started_ms=9000)
    ran(sim, "C", "stored1", 9000, "c-s9000")
    assert_violates(sim.check(), "rescheduled_fenced", "after the delete v2 stored at 8000")


@pytest.mark.parametrize("started", [6899, 6900])
def test_a_run_started_before_or_with_the_change_is_allowed(tmp_path: Path, started: int) -> None:
    """A run of version 0 that started before the change's store time, or in its millisecond
    (the two cannot be ordered), is no violation: rule 23 fences new runs only."""
    sim, h = start(tmp_path)
    h.c_won_t8000.update(version=0, run_started_ms=started)
    assert_clean(sim.check(), "rescheduled_fenced")


@pytest.mark.parametrize("reason", ["manual", "takeover"])
def test_manual_runs_and_takeovers_are_not_fenced(tmp_path: Path, reason: str) -> None:
    """A manual run (never fenced) or a later attempt (a run that had started), from version 0
    after the change, is not judged."""
    sim, h = start(tmp_path)
    if reason == "manual":
        h.c_won_t8000.update(version=0, reason="manual")
    else:
        versioned(sim.won("B", "timeout2", 8000, 2, "b-t8000-2", 9000, reason="takeover"), 0, started=9000)
    report = sim.check()
    assert_clean(report, "rescheduled_fenced")
    assert report.invariants["rescheduled_fenced"].checked == 3 - (reason == "manual"), report.format_table()


def test_a_change_that_raised_proves_nothing(tmp_path: Path) -> None:
    """The reschedule raised: whether (and when) it was stored is not known, so a run of version
    0 after it is not judged against it."""
    sim, h = start(tmp_path)
    for key in ("version", "updated_ms", "source", "updated_by"):
        del h.reschedule[key]
    h.reschedule["error"] = "StoreUnavailable: connection refused"
    h.c_won_t8000["version"] = 0
    assert_clean(sim.check(), "rescheduled_fenced")


def test_a_store_clock_step_between_change_and_run_is_skipped(tmp_path: Path) -> None:
    """The store's clock was stepped between the reschedule and the run: its times do not order them."""
    sim, h = start(tmp_path)
    h.c_won_t8000["version"] = 0
    sim.nemesis("clock-step", 7000, offset_ms=5000)
    sim.nemesis("clock-back", 7500)
    report = sim.check()
    assert_clean(report, "rescheduled_fenced")
    assert report.invariants["rescheduled_fenced"].skipped == 1, report.format_table()


def test_a_run_answered_before_the_change_was_sent_is_allowed_whatever_the_store_clock_says(
    tmp_path: Path,
) -> None:
    """C's claim of version 0 was answered at 6800, before the reschedule was sent (6900), yet its
    run's start reads 8000 on the store's clock and the change's 6900: the store's clock was
    stepped back between them (seen in a Valkey run). The run started before the change."""
    sim, h = start(tmp_path)
    h.c_won_t8000.update(version=0, t0_mono_ns=ns(6790), t1_mono_ns=ns(6800))
    sim.nemesis("clock-step", 6850, offset_ms=-2000)
    report = sim.check()
    assert_clean(report, "rescheduled_fenced")
    assert report.invariants["rescheduled_fenced"].skipped == 0, report.format_table()


def test_a_run_without_its_claim_line_is_skipped(tmp_path: Path) -> None:
    """The store holds timeout2@10000 started at 10000, after both changes; no line says from which version."""
    sim, _ = start(tmp_path)
    sim.record("timeout2", 10000, 1, "x-t10000", "C", "success")
    sim.attempts("timeout2", 10000, (1, "C", "schedule", 10000, 10200, "success"))
    report = sim.check()
    assert_clean(report, "rescheduled_fenced")
    assert report.invariants["rescheduled_fenced"].skipped == 1, report.format_table()


# -- stored_once -----------------------------------------------------------------------------------


def test_a_due_slot_of_a_stored_job_never_ran(tmp_path: Path) -> None:
    """Nobody claimed stored1@6000, due after the put was polled and before the delete, while B
    and C ran throughout."""
    sim, _ = start(tmp_path)
    drop_slot(sim, "stored1", 6000)
    sim.sink_from_records()
    assert_violates(sim.check(), "stored_once", "stored1@6000 (put v1 (1) stored at 3400): never ran")


def test_a_due_slot_answered_stale_everywhere_never_ran(tmp_path: Path) -> None:
    """Both claims of stored1@5000 were answered stale, though no change came after the put."""
    sim, h = start(tmp_path)
    drop_slot(sim, "stored1", 5000)
    versioned(sim.claim("B", "stored1", 5000, 5000, "stale"), 1)
    versioned(sim.claim("C", "stored1", 5000, 5000, "stale"), 1)
    sim.sink_from_records()
    assert_violates(sim.check(), "stored_once", "its claims were answered ['stale']")


def test_a_slot_missed_during_a_store_fault_is_skipped(tmp_path: Path) -> None:
    """stored1@6000 never ran, but the store was stalled for every instance around it."""
    sim, _ = start(tmp_path)
    drop_slot(sim, "stored1", 6000)
    sim.sink_from_records()
    sim.nemesis("stall", 5900)
    sim.nemesis("unstall", 6100)
    report = sim.check()
    assert_clean(report, "stored_once")
    assert report.invariants["stored_once"].skipped >= 1, report.format_table()


def test_slots_before_the_put_was_polled_need_not_run(tmp_path: Path) -> None:
    """A put at 4400 (stored at 4400): stored1@5000 falls due within poll_ms of it, and is not
    judged when nobody ran it; stored1@6000 still must."""
    sim, h = start(tmp_path)
    for line in (h.put,):
        line.update(t0_mono_ns=4_399_000_000, t1_mono_ns=4_400_000_000, mono_ns=4_400_000_000,
                    wall_ns=4_400_000_000, updated_ms=4400)  # fmt: skip
    drop_slot(sim, "stored1", 5000)
    sim.sink_from_records()
    report = sim.check()
    assert_clean(report, "stored_once")
    assert report.invariants["stored_once"].checked == 2, report.format_table()  # 6000 and its claim


def test_a_run_of_a_deleted_job(tmp_path: Path) -> None:
    """C wins stored1@9000 from version 2, the delete's: a deleted job's slot ran."""
    sim, h = start(tmp_path)
    h.c_stale_s9000.update(outcome="won", attempt=1, token="c-s9000", run_slot_ms=9000, run_started_ms=9000,
                           version=2)  # fmt: skip
    ran(sim, "C", "stored1", 9000, "c-s9000")
    assert_violates(sim.check(), "stored_once", "from version 2, which holds no stored job (delete v2")


def test_a_slot_that_is_not_of_the_put_schedule(tmp_path: Path) -> None:
    """stored1 is put again at 7000 as every 2 s (version 2); B wins stored1@7500 from version 2:
    not a slot of that schedule."""
    sim, h = start(tmp_path)
    sim.operator("put", "stored1", 7000, **dict(PUT, schedule="* * * * * */2"), **answer(2, 7000, "stored"))
    h.delete.update(version=3)
    versioned(sim.won("B", "stored1", 7500, 1, "b-s7500", 7500), 2, started=7500)
    ran(sim, "B", "stored1", 7500, "b-s7500")
    assert_violates(sim.check(), "stored_once", "stored1@7500: B won a new run from version 2: not a slot of its")


def test_a_claim_from_a_version_nobody_saw_answered_is_skipped(tmp_path: Path) -> None:
    """A put raised (its version unknown) and C's run of stored1@6000 carries version 3."""
    sim, h = start(tmp_path)
    h.c_won_s6000["version"] = 3
    sim.operator("put", "stored1", 5500, **PUT, error="TimeoutError: timed out")
    report = sim.check()
    assert_clean(report, "stored_once")
    assert report.invariants["stored_once"].skipped >= 1, report.format_table()


def test_a_replaced_stored_job_is_clean(tmp_path: Path) -> None:
    """stored1 is put again at 6400 as every 2 s (version 2); B's claim of stored1@7000, a slot of
    version 1 only, is answered stale; no slot of version 2 is due before the delete is sent."""
    sim, h = start(tmp_path)
    sim.operator("put", "stored1", 6400, **dict(PUT, schedule="* * * * * */2"), **answer(2, 6401, "stored"))
    h.delete.update(version=3)
    versioned(sim.claim("B", "stored1", 7000, 7000, "stale"), 1)
    report = sim.check()
    assert report.ok, report.format_table()


def test_no_slot_is_due_after_the_operator_stopped(tmp_path: Path) -> None:
    """The operator logs ``stopped`` at 6500, and the harness then stops the instances (SIGTERMs no
    line shows): stored1@6000, whose claim would be answered by 7251, is not judged."""
    sim, _ = start(tmp_path)
    drop_slot(sim, "stored1", 6000)
    sim.sink_from_records()
    sim.operator("stopped", "", 6499)
    report = sim.check()
    assert_clean(report, "stored_once")
    assert report.invariants["stored_once"].checked == 2, report.format_table()  # stored1@5000 and its claim
