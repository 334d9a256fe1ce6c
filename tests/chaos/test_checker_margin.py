"""The chaos checker's ``margin_kept``: synthetic logs, no processes.

Runner A wins ``long2@2000`` at 2000 (lease 2000 ms, heartbeats every 500 ms, so LeaseCron's
default ``lease_margin_ms`` is 200 ms), renews at 2500, is cut off from the store after it (its
heartbeats fail from 3000 on) and logs ``lost`` (unrenewed) by its local deadline; B takes the
slot over once the lease ended and begins at 4502 (:func:`tests.chaos.sim_margin.cut_off`). The
gap from A's ``lost`` to B's start may fall short of the margin by
:data:`~chaoslib.checker.margin.MARGIN_TOLERANCE_MS` (50 ms), not more: 150 ms here.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from chaoslib.checker.margin import MARGIN_TOLERANCE_MS

from . import sim_margin
from .sim import HB, LEASE, Sim, assert_clean, assert_violates, start

pytestmark = pytest.mark.timeout(30)

#: LeaseCron's default for LEASE and HB: min(500, 2000 // 10, 2000 - 2 * 500).
MARGIN = 200
BOUND = MARGIN - MARGIN_TOLERANCE_MS
#: When B's handler begins: after the lease (renewed at 2500) ended at 4500.
B_START = 4502


def cut_off(tmp_path: Path, lost_at: float, reason: str = "unrenewed") -> SimpleNamespace:
    """A cut off, its ``lost`` at ``lost_at``; B takes over and begins at :data:`B_START`."""
    sim = Sim(tmp_path)
    sim.instance("A", 101)
    sim.instance("B", 102)
    h = sim_margin.cut_off(sim, "A", "B", 2000, lost_at, reason)
    assert h.start == B_START
    h.sim = sim
    return h


def test_default_margin_is_leasecrons() -> None:
    """The checker judges by LeaseCron's default when the run gave no margin."""
    from chaoslib.checker import Config

    assert Config(lease_ms=LEASE, heartbeat_ms=HB).margin_of_lease_ms == MARGIN
    assert Config(lease_ms=LEASE, heartbeat_ms=HB, lease_margin_ms=0).margin_of_lease_ms == 0


def test_the_clean_run_s_cut_off_runner_keeps_the_margin(tmp_path: Path) -> None:
    """The clean run's M gives its run up by its local deadline, 202 ms before N begins."""
    sim, _ = start(tmp_path)
    report = sim.check()
    assert_clean(report, "margin_kept")
    assert report.margin_gaps_ms == [202]


def test_a_gap_just_above_the_bound_holds(tmp_path: Path) -> None:
    h = cut_off(tmp_path, B_START - BOUND - 1)
    report = h.sim.check()
    assert_clean(report, "margin_kept")
    assert report.invariants["margin_kept"].checked == 1
    assert report.smallest_margin_gap_ms == BOUND + 1
    assert f"smallest {BOUND + 1} ms (lease_margin_ms {MARGIN} ms, tolerance {MARGIN_TOLERANCE_MS} ms)" in (
        report.format_table()
    )


def test_a_gap_just_below_the_bound_is_a_violation(tmp_path: Path) -> None:
    h = cut_off(tmp_path, B_START - BOUND + 1)
    report = h.sim.check()
    assert_violates(report, "margin_kept", f"logged lost (unrenewed) {BOUND - 1} ms before long2@2000 #2")


def test_a_lost_after_the_backup_began_is_a_violation(tmp_path: Path) -> None:
    h = cut_off(tmp_path, B_START + 20)
    assert_violates(h.sim.check(), "margin_kept", "-20 ms before")


def test_the_run_s_own_margin_sets_the_bound(tmp_path: Path) -> None:
    """With ``lease_margin_ms=400`` a gap of 200 ms is too small; with 0 a gap of -40 ms is not."""
    h = cut_off(tmp_path, B_START - 200)
    assert_violates(h.sim.check(lease_margin_ms=400), "margin_kept", "(lease_margin_ms 400 ms, tolerance 50 ms)")
    (tmp_path / "zero").mkdir()
    h = cut_off(tmp_path / "zero", B_START + 40)
    assert_clean(h.sim.check(lease_margin_ms=0), "margin_kept")


@pytest.mark.parametrize(
    "excuse",
    ["frozen since its renewal", "released after lost", "failover", "store clock step"],
)
def test_what_can_end_a_lease_early_or_hold_a_runner_back_is_skipped(tmp_path: Path, excuse: str) -> None:
    """A gap below the bound is not judged when A was SIGSTOPped after its last renewal, released
    the run after ``lost`` (a late renewal given back), or the store failed over or its clock
    jumped meanwhile."""
    lost_at = B_START - 20
    h = cut_off(tmp_path, lost_at)
    sim: Any = h.sim
    if excuse == "frozen since its renewal":
        sim.nemesis("stop", 3000, "A")
        sim.nemesis("cont", lost_at - 5, "A")
    elif excuse == "released after lost":
        sim.call("A", "release", h.ids, lost_at + 3, True)
    elif excuse == "failover":
        sim.nemesis("failover", 3500, how="kill", duration_ms=800)
    else:
        sim.nemesis("clock-step", 3500, offset_ms=5_000)
        sim.nemesis("clock-back", 3600)
    report = sim.check()
    inv = report.invariants["margin_kept"]
    assert (inv.checked, inv.skipped, inv.violations) == (0, 1, []), report.format_table()


def test_a_fenced_lost_is_not_judged(tmp_path: Path) -> None:
    """A ``lost`` because a heartbeat was refused comes after the backup's claim: no margin to keep."""
    h = cut_off(tmp_path, B_START + 20, reason="fenced")
    inv = h.sim.check().invariants["margin_kept"]
    assert (inv.checked, inv.skipped, inv.violations) == (0, 0, [])
