"""A dead run and the job's next slot, for each ``overlap`` mode: when the dead run is taken over,
when the next slot supersedes it, when the next slot is skipped (docs/guarantees.rst, "A dead run
and the next slot"). Stepped (tests/engine/stepped.py): the test moves the clock, on the memory
store.

The scene: slot S of a job every 3 s is won by a runner that renews its lease every heartbeat
(100 ms, lease 500 ms) and dies just after a renewal, so its lease ends at E = that renewal +
lease_ms. One instance backs S up (it starts while S runs, so its checks fall where the test
wants) and claims the next slot S' = S + 3 s at S' + its jitter. The formula, with the first
backup check at or after E (within two heartbeats: E <= check < E + 2 x heartbeat_ms) and the
first claim of S' (within S' and S' + jitter_ms):

* E <= S' - 2 x heartbeat_ms: the dead run is taken over, in both modes;
* E > S' + jitter_ms: with "allow" the next slot starts and the dead run ends interrupted
  (superseded, no takeover); with "skip" the next slot is skipped and the dead run taken over;
* in between, whichever reaches the store first: a check at or after E takes the run over; a
  claim of S' at or after E (and, with "allow", also before it) supersedes it.

The boundary cases run with every random wait at its longest or placed on purpose (a backup's
check 2 heartbeats after the one before, a claim's jitter ``jitter_ms``): at each bound and one
millisecond (two where one would be a tie) on its other side. A sweep with seeded random waits
checks the outcome against the order of the claims across the whole window.
"""

from __future__ import annotations

import random
from typing import List, Optional, Tuple

import pytest

from leasecron import MemoryStore, Run
from leasecron.runs import Claim
from leasecron.stores import ClaimRequest
from tests.engine.stepped import ManualTime, Stepped, at
from tests.engine.support import HEARTBEAT, LEASE, dead_claim, stored

pytestmark = pytest.mark.timeout(60)

#: The job's interval (s), its slot S whose runner dies, and the next slot S'.
INTERVAL = 3
S, NEXT = at(3), at(6)
#: The jitter of the boundary cases that have one.
JITTER = 300
MODES = ("allow", "skip")


class ClaimLog(MemoryStore):
    """A memory store that notes every claim, in order: (reason, slot_ms, the store's time)."""

    def __init__(self, time: ManualTime) -> None:
        super().__init__(clock=time.store_ms)
        self.claims: List[Tuple[str, int, int]] = []

    def _claim(self, request: ClaimRequest) -> Claim:
        self.claims.append((str(request.reason), request.slot_ms, self.now_ms()))
        return super()._claim(request)


class Scene:
    """A dying runner of S whose lease ends at ``lease_end``, and the instance that backs it up,
    started so that its checks fall on ``check_at`` (modulo two heartbeats: waits at their
    longest) and claiming S' with ``jitter_ms``."""

    def __init__(self, overlap: str, lease_end: int, jitter_ms: int, check_at: Optional[int] = None) -> None:
        renewals = (lease_end - LEASE - S) // HEARTBEAT
        claimed = lease_end - LEASE - renewals * HEARTBEAT  # in [S, S + heartbeat)
        time = ManualTime(claimed)
        self.store = ClaimLog(time)
        self.s = Stepped(claimed, time=time, store=self.store)
        self.dead: Run = dead_claim(self.store, "job", S, LEASE)
        self.lease_end = lease_end
        self.last_renewal = lease_end - LEASE  # the runner dies just after it
        phase = check_at if check_at is not None else lease_end + 2 * HEARTBEAT - 1  # the latest check
        boot = claimed + 1 + (phase - claimed - 1) % (2 * HEARTBEAT)
        self._advance_to(boot)
        self.s.boot(self.s.job(INTERVAL, catch_up_ms=0, overlap=overlap, jitter_ms=jitter_ms))
        self._advance_to(NEXT + 1_000)  # every check and claim of the window is past
        assert stored(self.store, "job", S).lease_end_ms >= lease_end  # the scene is as planned
        self.s.stop()

    def _advance_to(self, store_ms: int) -> None:
        """Let time pass, the dying runner renewing every heartbeat from its claim until it dies."""
        while self.s.time.store_ms() < store_ms:
            self.s.advance(1)
            now = self.s.time.store_ms()
            if (now - self.dead.started_ms) % HEARTBEAT == 0 and now <= self.last_renewal:
                assert self.store.heartbeat("job", S, self.dead.token, LEASE)

    def claims(self, reason: str, slot_ms: int) -> List[int]:
        """When each claim of ``reason`` for ``slot_ms`` reached the store."""
        return [now for why, slot, now in self.store.claims if why == reason and slot == slot_ms]

    def first_check(self) -> Optional[int]:
        """When the first backup check of S at or after the lease's end reached the store; None
        when there was none (with skip, a backup stops checking S once S' started)."""
        return min((now for now in self.claims("takeover", S) if now >= self.lease_end), default=None)

    def taken_over(self) -> bool:
        """S ran again as attempt 2 on the backup (and succeeded); False: attempt 1 only."""
        run = stored(self.store, "job", S)
        if run.attempt == 2:
            assert (run.status, run.runner) == ("success", "a")
            assert self.s.of("start", slot_ms=S)[0].reason == "takeover"
            return True
        assert (run.attempt, run.status, run.runner, run.token) == (1, "interrupted", "dead", self.dead.token)
        assert run.error is not None and run.error.startswith("superseded: slot ")
        assert self.s.of("start", slot_ms=S) == []
        return False

    def next_slot(self) -> str:
        """What became of S': ``ran`` (a schedule claim started it) or ``skipped`` (overlap, no run)."""
        skips = self.s.of("skip", slot_ms=NEXT)
        run = self.store.get_run("job", NEXT)
        if skips:
            assert [e.reason for e in skips] == ["overlap"] and run is None
            return "skipped"
        assert run is not None and (run.attempt, run.status, run.reason) == (1, "success", "schedule")
        return "ran"


@pytest.fixture
def longest_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every random wait of the engine at its longest: a backup checks 2 heartbeats after its
    previous check, a claim waits its whole ``jitter_ms`` (a billionth of the range less, so that
    the sums of float seconds land on the intended millisecond, not one after it)."""
    monkeypatch.setattr(random, "uniform", lambda low, high: high - (high - low) * 1e-9)


@pytest.mark.usefixtures("longest_waits")
@pytest.mark.parametrize("overlap", MODES)
def test_a_lease_ending_two_heartbeats_before_the_next_slot_is_always_taken_over(overlap: str) -> None:
    """E = S' - 2 heartbeats, the backup's check as late as it can be (E + 2 heartbeats - 1 ms):
    it still comes before S' is claimed, so the dead run is taken over in both modes (the
    takeover ended at once here, so S' runs; one still running would make S' skip, with skip)."""
    scene = Scene(overlap, NEXT - 2 * HEARTBEAT, 0)
    assert scene.first_check() == scene.lease_end + 2 * HEARTBEAT - 1 < scene.claims("schedule", NEXT)[0] == NEXT
    assert scene.taken_over() and scene.next_slot() == "ran"


@pytest.mark.usefixtures("longest_waits")
@pytest.mark.parametrize("overlap", MODES)
def test_a_lease_ending_less_than_two_heartbeats_before_the_next_slot_can_be_superseded(overlap: str) -> None:
    """E = S' - 2 heartbeats + 2 ms, the backup's check at E + 2 heartbeats - 1 ms = S' + 1 ms:
    the claim of S' at S' comes first, after E: S' runs, and the dead run is interrupted without
    a takeover (superseded), in both modes."""
    scene = Scene(overlap, NEXT - 2 * HEARTBEAT + 2, 0)
    assert scene.lease_end < scene.claims("schedule", NEXT)[0] == NEXT
    # the check due at S' + 1 ms finds the run ended (allow); with skip, the backup forgot S once S' started
    assert scene.first_check() == (NEXT + 1 if overlap == "allow" else None)
    assert not scene.taken_over() and scene.next_slot() == "ran"
    assert stored(scene.store, "job", S).finished_ms == NEXT  # the claim of S' ended it (rule 11)


@pytest.mark.usefixtures("longest_waits")
@pytest.mark.parametrize("overlap", MODES)
def test_a_lease_outliving_the_last_claim_of_the_next_slot(overlap: str) -> None:
    """E = S' + jitter_ms + 1 ms: every claim of S' (the latest at S' + jitter_ms) reaches the
    store while the dead lease lives. With allow, S' starts and the dead run is interrupted at the
    backup's first check after E (superseded); with skip, S' is skipped and that check takes the
    dead run over."""
    scene = Scene(overlap, NEXT + JITTER + 1, JITTER)
    assert scene.claims("schedule", NEXT) == [NEXT + JITTER]
    check = scene.first_check()
    assert check is not None and scene.lease_end <= check < scene.lease_end + 2 * HEARTBEAT
    if overlap == "allow":
        assert not scene.taken_over() and scene.next_slot() == "ran"
        assert stored(scene.store, "job", S).finished_ms == check  # ended by the check (rule 4)
    else:
        assert scene.taken_over() and scene.next_slot() == "skipped"
        assert stored(scene.store, "job", S).started_ms == check


@pytest.mark.usefixtures("longest_waits")
@pytest.mark.parametrize("overlap", MODES)
def test_a_lease_ending_by_the_last_claim_of_the_next_slot(overlap: str) -> None:
    """E = S' + jitter_ms - 1 ms: the lease ended before the claim of S' (at S' + jitter_ms), so
    the first to reach the store decides. A check at E comes first: the dead run is taken over,
    in both modes, and S' runs beside it (allow) or after it (skip); a check after the claim: the
    claim supersedes the dead run, in both modes (the skip mode's claim no longer skips). And
    E = S' + jitter_ms, the claim at E itself: a lease ending at that instant no longer holds."""
    cases = ((JITTER - 1, JITTER - 1, True), (JITTER - 1, JITTER + 1, False), (JITTER, JITTER + 1, False))
    for lease_end, check_at, taken in ((NEXT + e, NEXT + c, taken) for e, c, taken in cases):
        scene = Scene(overlap, lease_end, JITTER, check_at=check_at)
        assert scene.claims("schedule", NEXT) == [NEXT + JITTER]
        assert scene.first_check() == (None if overlap == "skip" and not taken else check_at)
        assert scene.taken_over() is taken and scene.next_slot() == "ran"


@pytest.mark.parametrize("overlap", MODES)
@pytest.mark.parametrize("jitter_ms", [0, JITTER])
def test_the_order_of_the_claims_decides_across_the_whole_window(
    overlap: str, jitter_ms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded random waits, the lease's end swept from 3 heartbeats before S' to 3 heartbeats
    after S' + jitter_ms: outside the window the formula's outcome, inside it the order in which
    the first check at or after E and the first claim of S' reached the store."""
    rng = random.Random(31 + jitter_ms + len(overlap))
    monkeypatch.setattr(random, "uniform", rng.uniform)
    middle = set()  # the outcomes where the order decides
    for lease_end in range(NEXT - 3 * HEARTBEAT, NEXT + jitter_ms + 3 * HEARTBEAT, 7):
        scene = Scene(overlap, lease_end, jitter_ms, check_at=lease_end + rng.randrange(2 * HEARTBEAT))
        check, claim = scene.first_check(), scene.claims("schedule", NEXT)[0]
        order = scene.store.claims
        check_first = check is not None and order.index(("takeover", S, check)) < order.index(("schedule", NEXT, claim))
        taken = scene.taken_over()
        if lease_end <= NEXT - 2 * HEARTBEAT:
            assert taken, lease_end
        if lease_end > NEXT + jitter_ms:
            assert taken is (overlap == "skip"), lease_end
        assert taken is (check_first or (overlap == "skip" and claim < lease_end)), (lease_end, check, claim)
        assert scene.next_slot() == ("skipped" if overlap == "skip" and claim < lease_end else "ran")
        if NEXT - 2 * HEARTBEAT < lease_end <= NEXT + jitter_ms:
            middle.add(taken)
    assert middle == {True, False}
