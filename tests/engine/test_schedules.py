"""Schedules: cron strings (5 or 6 fields, tz, DST; the DST rule itself in test_dst.py) and
epoch-aligned intervals; the same slots on every instance; jobs fire on their slots."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import List

import pytest

from leasecron import LeaseCron, MemoryStore
from leasecron.schedules import Schedule
from tests.engine.conftest import MakeCron
from tests.engine.support import Calls, Recorder, handler
from tests.helpers import wait_for

UTC = timezone.utc


def ms(text: str) -> int:
    """Epoch ms of an ISO 8601 time with offset."""
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def schedule_of(spec: object, **options: object) -> Schedule:
    cron = LeaseCron(MemoryStore(), runner="r")
    cron.add_job(lambda: None, spec, name="j", **options)  # type: ignore[arg-type]
    return cron.jobs["j"].schedule


def slots(schedule: Schedule, start: int, count: int) -> List[int]:
    out, t = [], start
    for _ in range(count):
        t = schedule.next_after(t)
        out.append(t)
    return out


def test_five_field_cron_next_after_and_at_or_before() -> None:
    """A 5-field cron: next_after is strictly after, at_or_before is at or before (UTC by default)."""
    s = schedule_of("*/15 * * * *")
    t = ms("2024-05-01T10:07:12.345+00:00")
    assert s.next_after(t) == ms("2024-05-01T10:15:00+00:00")
    assert s.at_or_before(t) == ms("2024-05-01T10:00:00+00:00")
    slot = ms("2024-05-01T10:15:00+00:00")
    assert s.next_after(slot) == ms("2024-05-01T10:30:00+00:00")
    assert s.next_after(slot - 1) == slot
    assert s.at_or_before(slot) == slot
    assert s.at_or_before(slot - 1) == ms("2024-05-01T10:00:00+00:00")


def test_six_field_cron_has_seconds_last() -> None:
    """A 6-field cron (croniter syntax) reads its last field as seconds."""
    s = schedule_of("* * * * * */2")
    t = ms("2024-05-01T10:00:03.500+00:00")
    assert s.next_after(t) == ms("2024-05-01T10:00:04+00:00")
    assert s.at_or_before(t) == ms("2024-05-01T10:00:02+00:00")
    assert slots(s, t, 3) == [ms(f"2024-05-01T10:00:{x:02d}+00:00") for x in (4, 6, 8)]
    s30 = schedule_of("5 * * * * 30")
    assert s30.next_after(ms("2024-05-01T10:00:00+00:00")) == ms("2024-05-01T10:05:30+00:00")
    assert s30.at_or_before(ms("2024-05-01T10:05:29.999+00:00")) == ms("2024-05-01T09:05:30+00:00")


def test_tz_changes_the_utc_slots() -> None:
    """"0 6 * * *" in Europe/Berlin is 04:00 UTC in summer and 05:00 UTC in winter, unlike UTC."""
    utc = schedule_of("0 6 * * *")
    berlin = schedule_of("0 6 * * *", tz="Europe/Berlin")
    summer = ms("2024-07-01T00:00:00+00:00")
    winter = ms("2024-01-10T00:00:00+00:00")
    assert utc.next_after(summer) == ms("2024-07-01T06:00:00+00:00")
    assert berlin.next_after(summer) == ms("2024-07-01T04:00:00+00:00")
    assert berlin.next_after(winter) == ms("2024-01-10T05:00:00+00:00")
    assert berlin.at_or_before(summer + 12 * 3_600_000) == ms("2024-07-01T04:00:00+00:00")


@pytest.mark.parametrize("expression", ["30 2 * * *", "0,30 * * * *", "15 1-3 * * *", "0 6 * * *", "* 2 * * * 30"])
@pytest.mark.parametrize("around", ["2024-03-31T00:00:00+00:00", "2024-10-27T00:00:00+00:00"])
def test_dst_gap_and_repeat_give_increasing_slots_equal_on_every_instance(expression: str, around: str) -> None:
    """Across DST gap and repeat (Europe/Berlin) slots strictly increase and are the same on every instance."""
    a = schedule_of(expression, tz="Europe/Berlin")
    b = schedule_of(expression, tz="Europe/Berlin")
    ours = [a.next_after(ms(around) - 6 * 3_600_000)]
    while len(ours) < 30 or ours[-1] <= ms(around) + 6 * 3_600_000:  # well across the change
        ours.append(a.next_after(ours[-1]))
    assert all(x < y for x, y in zip(ours, ours[1:])), ours
    for i in (0, 3, 7, 15):  # another instance starting between two slots sees the same ones
        theirs = slots(b, ours[i] + 1 + i * 97, 10)
        assert theirs == ours[i + 1 : i + 11]
    for prev, slot in zip(ours, ours[1:]):
        assert b.at_or_before(slot) == slot
        assert b.at_or_before(slot - 1) == prev
        assert b.next_after(prev) == slot


@pytest.mark.parametrize(
    "spec, interval_ms",
    [
        (1, 1_000),
        (90, 90_000),
        (0.25, 250),
        (2.5, 2_500),
        (timedelta(minutes=5), 300_000),
        (timedelta(milliseconds=1_500), 1_500),
    ],
)
def test_intervals_are_aligned_to_the_epoch(spec: object, interval_ms: int) -> None:
    """An interval (int or float seconds, timedelta) has the multiples of the interval as slots."""
    s = schedule_of(spec)
    t = ms("2024-05-01T10:07:12.345+00:00")
    nxt = s.next_after(t)
    assert nxt % interval_ms == 0 and t < nxt <= t + interval_ms
    prev = s.at_or_before(t)
    assert prev is not None and prev % interval_ms == 0 and t - interval_ms < prev <= t
    assert s.next_after(nxt) == nxt + interval_ms
    assert s.at_or_before(nxt) == nxt
    assert s.next_after(nxt - 1) == nxt


def test_interval_slots_are_the_same_on_every_instance() -> None:
    """Two instances started at different times compute the same interval slots."""
    a, b = schedule_of(7), schedule_of(timedelta(seconds=7))
    t = ms("2024-05-01T10:07:12.345+00:00")
    ours = slots(a, t, 5)
    assert ours == slots(b, t, 5)
    assert ours[1:] == slots(b, ours[0] + 123, 4)
    assert ours[2:] == slots(b, ours[1] + 6_999, 3)


def test_job_on_a_one_second_interval_fires_on_whole_seconds(make_cron: MakeCron) -> None:
    """A 1 s interval job runs on whole seconds of the store's clock, one slot after the other, on time
    (each handler called within 300 ms of its slot, by the instance's own estimate of the store's
    clock: a round trip to read the store's time would count the store's lag, not the instance's)."""
    cron = make_cron("a", catch_up_ms=0)
    calls = Calls()
    cron.add_job(handler(cron.clock, calls), 1, name="tick")
    cron.start()
    contexts = calls.wait(3, timeout=5)[:3]
    assert [c.slot_ms % 1000 for c in contexts] == [0, 0, 0]
    assert [c.slot_ms - contexts[0].slot_ms for c in contexts] == [0, 1_000, 2_000]
    for ctx, arrived in zip(contexts, calls.times):
        assert 0 <= arrived - ctx.slot_ms < 300, (arrived, ctx.slot_ms)


def test_six_field_cron_job_fires_on_even_seconds(make_cron: MakeCron) -> None:
    """A job on "* * * * * */2" runs on even seconds only, every 2 s."""
    cron = make_cron("a", catch_up_ms=0)
    rec = Recorder(cron)
    cron.add_job(lambda: None, "* * * * * */2", name="even")
    cron.start()
    rec.wait("success", timeout=4)
    first = rec.of("start")[0].slot_ms
    second = rec.wait("start", timeout=4, slot_ms=first + 2_000)
    assert first % 2_000 == 0
    assert second.run is not None and second.run.started_ms - second.slot_ms < 300
    assert all(e.slot_ms % 2_000 == 0 for e in rec.of("start"))


def test_scheduled_claims_wait_a_random_jitter(make_cron: MakeCron) -> None:
    """Before a scheduled claim each instance waits a uniform random delay in [0, jitter_ms], on a real
    instance and store: the runs start spread out, none before its slot, none much after the jitter.

    The exact bound (each claim within jitter_ms, to the millisecond) is proved on the stepped clock
    (test_stepped.py); here a run's start is the store's time of its claim, after the timer fired,
    the batch formed and the round trip, which a loaded host can delay: CI saw 453 ms once, on
    PostgreSQL, with the others at most 220 ms. So the tolerance is a 300 ms pause."""
    jitter = 300
    cron = make_cron("a", catch_up_ms=0, jitter_ms=jitter)
    rec = Recorder(cron)
    names = [f"job{i}" for i in range(6)]
    for name in names:
        cron.add_job(lambda: None, 1, name=name)
    cron.start()
    first = rec.wait("start", timeout=3).slot_ms
    wait_for(lambda: all(rec.of("start", job=n, slot_ms=first) for n in names), 2)
    delays = [rec.of("start", job=n, slot_ms=first)[0].run.started_ms - first for n in names]  # type: ignore[union-attr]
    assert all(0 <= d <= jitter + 300 for d in delays), delays
    assert max(delays) - min(delays) > 30, f"no jitter: {delays}"
    assert all(e.reason == "schedule" for e in rec.of("start"))
