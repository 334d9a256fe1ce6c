"""Cron schedules across changes of time (daylight saving time), as Vixie cron runs them.

A fixed-time job (minute and hour fields not starting with ``*``) runs once per local
time: a skipped one at the first instant after the gap, a repeated one at its first
occurrence. A wildcard job (minute or hour field starting with ``*``) runs at every
instant the wall clock shows one of its local times: never in a gap, twice in a repeat.
Pure functions of the expression, the zone and the time: no store needed.

Expected slots are written by hand as local times with their UTC offset (each an exact
instant), on a day relative to the day of the change: ``"-1 02:30+01:00"`` is 02:30 at
UTC+1 on the day before. The changes, from the zone rules (and checked with zoneinfo):

* Europe/Berlin, at 01:00 UTC: last Sunday of March, 02:00 +01:00 -> 03:00 +02:00
  (02:00-03:00 skipped); last Sunday of October, 03:00 +02:00 -> 02:00 +01:00
  (02:00-03:00 repeated).
* America/New_York: second Sunday of March at 07:00 UTC, 02:00 -05:00 -> 03:00 -04:00;
  first Sunday of November at 06:00 UTC, 02:00 -04:00 -> 01:00 -05:00 (01:00-02:00 repeated).
* Australia/Lord_Howe, half an hour: first Sunday of October at 15:30 UTC the day before,
  02:00 +10:30 -> 02:30 +11:00 (02:00-02:30 skipped); first Sunday of April at 15:00 UTC
  the day before, 02:00 +11:00 -> 01:30 +10:30 (01:30-02:00 repeated).
* Asia/Tokyo: +09:00 all year.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Dict, List, Tuple

import pytest

from leasecron.schedules import CronSchedule

# zone -> kind of change -> year -> the local date of the change.
CHANGE_DAYS = {
    "Europe/Berlin": {
        "forward": {2026: "2026-03-29", 2027: "2027-03-28"},
        "back": {2026: "2026-10-25", 2027: "2027-10-31"},
    },
    "America/New_York": {
        "forward": {2026: "2026-03-08", 2027: "2027-03-14"},
        "back": {2026: "2026-11-01", 2027: "2027-11-07"},
    },
    "Australia/Lord_Howe": {
        "forward": {2026: "2026-10-04", 2027: "2027-10-03"},
        "back": {2026: "2026-04-05", 2027: "2027-04-04"},
    },
    "Asia/Tokyo": {"none": {2026: "2026-03-29", 2027: "2027-10-31"}},
}

# The instants of those changes, in UTC.
CHANGES_UTC = [
    ("Europe/Berlin", "2026-03-29T01:00:00+00:00"),
    ("Europe/Berlin", "2026-10-25T01:00:00+00:00"),
    ("Europe/Berlin", "2027-03-28T01:00:00+00:00"),
    ("Europe/Berlin", "2027-10-31T01:00:00+00:00"),
    ("America/New_York", "2026-03-08T07:00:00+00:00"),
    ("America/New_York", "2026-11-01T06:00:00+00:00"),
    ("America/New_York", "2027-03-14T07:00:00+00:00"),
    ("America/New_York", "2027-11-07T06:00:00+00:00"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00+00:00"),
    ("Australia/Lord_Howe", "2027-04-03T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2027-10-02T15:30:00+00:00"),
    ("Asia/Tokyo", "2026-03-29T01:00:00+00:00"),
]

# (zone, change) -> (expression, start, the slots after start), as local times with their offset.
AROUND_CHANGES: Dict[Tuple[str, str], List[Tuple[str, str, str]]] = {
    ("Europe/Berlin", "forward"): [  # 02:00 +01:00 -> 03:00 +02:00
        ("30 2 * * *", "-1 00:00+01:00", "-1 02:30+01:00, 0 03:00+02:00, 1 02:30+02:00"),  # at the change
        ("0 6 * * *", "-1 00:00+01:00", "-1 06:00+01:00, 0 06:00+02:00, 1 06:00+02:00"),
        ("0,30 2 * * *", "-1 02:10+01:00", "-1 02:30+01:00, 0 03:00+02:00, 1 02:00+02:00"),  # both at once
        ("0 * * * *", "0 00:30+01:00", "0 01:00+01:00, 0 03:00+02:00, 0 04:00+02:00"),  # no 02:00 shows
        ("30 * * * *", "0 00:45+01:00", "0 01:30+01:00, 0 03:30+02:00, 0 04:30+02:00"),
        ("*/15 * * * *", "0 01:40+01:00", "0 01:45+01:00, 0 03:00+02:00, 0 03:15+02:00"),
        ("*/20 2 * * *", "-1 02:50+01:00", "1 02:00+02:00, 1 02:20+02:00"),  # wildcard: none on the day
        ("* * * * * */30", "0 01:59:00+01:00", "0 01:59:30+01:00, 0 03:00:00+02:00"),
        ("30 2 * * * 15", "-1 00:00+01:00", "-1 02:30:15+01:00, 0 03:00+02:00, 1 02:30:15+02:00"),
    ],
    ("Europe/Berlin", "back"): [  # 03:00 +02:00 -> 02:00 +01:00
        ("30 2 * * *", "-1 00:00+02:00", "-1 02:30+02:00, 0 02:30+02:00, 1 02:30+01:00"),  # first 02:30 only
        ("0 6 * * *", "-1 00:00+02:00", "-1 06:00+02:00, 0 06:00+01:00, 1 06:00+01:00"),
        ("0,30 2 * * *", "0 00:00+02:00", "0 02:00+02:00, 0 02:30+02:00, 1 02:00+01:00"),
        ("0 * * * *", "0 01:30+02:00", "0 02:00+02:00, 0 02:00+01:00, 0 03:00+01:00"),  # both 02:00
        ("30 * * * *", "0 01:45+02:00", "0 02:30+02:00, 0 02:30+01:00, 0 03:30+01:00"),
        ("*/15 * * * *", "0 02:40+02:00", "0 02:45+02:00, 0 02:00+01:00, 0 02:15+01:00"),
        (
            "*/20 2 * * *",
            "0 01:50+02:00",
            "0 02:00+02:00, 0 02:20+02:00, 0 02:40+02:00, 0 02:00+01:00, 0 02:20+01:00, 0 02:40+01:00",
        ),  # wildcard: both passes
        ("* * * * * */30", "0 02:59:00+02:00", "0 02:59:30+02:00, 0 02:00:00+01:00"),
        ("30 2 * * * 15", "-1 00:00+02:00", "-1 02:30:15+02:00, 0 02:30:15+02:00, 1 02:30:15+01:00"),
    ],
    ("America/New_York", "forward"): [  # 02:00 -05:00 -> 03:00 -04:00
        ("30 2 * * *", "-1 00:00-05:00", "-1 02:30-05:00, 0 03:00-04:00, 1 02:30-04:00"),
        ("0 6 * * *", "-1 00:00-05:00", "-1 06:00-05:00, 0 06:00-04:00, 1 06:00-04:00"),
        ("0 * * * *", "0 00:30-05:00", "0 01:00-05:00, 0 03:00-04:00, 0 04:00-04:00"),
        ("30 * * * *", "0 00:45-05:00", "0 01:30-05:00, 0 03:30-04:00, 0 04:30-04:00"),
        ("*/15 * * * *", "0 01:40-05:00", "0 01:45-05:00, 0 03:00-04:00, 0 03:15-04:00"),
        ("* * * * * */30", "0 01:59:00-05:00", "0 01:59:30-05:00, 0 03:00:00-04:00"),
        ("30 2 * * * 15", "-1 00:00-05:00", "-1 02:30:15-05:00, 0 03:00-04:00, 1 02:30:15-04:00"),
    ],
    ("America/New_York", "back"): [  # 02:00 -04:00 -> 01:00 -05:00
        ("30 1 * * *", "-1 00:00-04:00", "-1 01:30-04:00, 0 01:30-04:00, 1 01:30-05:00"),
        ("30 2 * * *", "-1 00:00-04:00", "-1 02:30-04:00, 0 02:30-05:00, 1 02:30-05:00"),
        ("0 * * * *", "0 00:30-04:00", "0 01:00-04:00, 0 01:00-05:00, 0 02:00-05:00"),
        ("30 * * * *", "0 00:45-04:00", "0 01:30-04:00, 0 01:30-05:00, 0 02:30-05:00"),
        ("*/15 * * * *", "0 01:40-04:00", "0 01:45-04:00, 0 01:00-05:00, 0 01:15-05:00"),
        ("* * * * * */30", "0 01:59:00-04:00", "0 01:59:30-04:00, 0 01:00:00-05:00"),
        ("30 1 * * * 15", "-1 00:00-04:00", "-1 01:30:15-04:00, 0 01:30:15-04:00, 1 01:30:15-05:00"),
    ],
    ("Australia/Lord_Howe", "forward"): [  # 02:00 +10:30 -> 02:30 +11:00
        ("15 2 * * *", "-1 00:00+10:30", "-1 02:15+10:30, 0 02:30+11:00, 1 02:15+11:00"),
        ("0 6 * * *", "-1 00:00+10:30", "-1 06:00+10:30, 0 06:00+11:00, 1 06:00+11:00"),
        ("0 * * * *", "0 00:30+10:30", "0 01:00+10:30, 0 03:00+11:00, 0 04:00+11:00"),
        ("30 * * * *", "0 00:45+10:30", "0 01:30+10:30, 0 02:30+11:00, 0 03:30+11:00"),
        ("*/15 * * * *", "0 01:40+10:30", "0 01:45+10:30, 0 02:30+11:00, 0 02:45+11:00"),
        ("* * * * * */30", "0 01:59:00+10:30", "0 01:59:30+10:30, 0 02:30:00+11:00"),
        ("15 2 * * * 15", "-1 00:00+10:30", "-1 02:15:15+10:30, 0 02:30+11:00, 1 02:15:15+11:00"),
    ],
    ("Australia/Lord_Howe", "back"): [  # 02:00 +11:00 -> 01:30 +10:30
        ("45 1 * * *", "-1 00:00+11:00", "-1 01:45+11:00, 0 01:45+11:00, 1 01:45+10:30"),
        ("0 6 * * *", "-1 00:00+11:00", "-1 06:00+11:00, 0 06:00+10:30, 1 06:00+10:30"),
        ("0 * * * *", "0 00:30+11:00", "0 01:00+11:00, 0 02:00+10:30, 0 03:00+10:30"),
        ("30 * * * *", "0 00:45+11:00", "0 01:30+11:00, 0 01:30+10:30, 0 02:30+10:30"),
        ("*/15 * * * *", "0 01:40+11:00", "0 01:45+11:00, 0 01:30+10:30, 0 01:45+10:30"),
        ("* * * * * */30", "0 01:59:00+11:00", "0 01:59:30+11:00, 0 01:30:00+10:30"),
        ("45 1 * * * 15", "-1 00:00+11:00", "-1 01:45:15+11:00, 0 01:45:15+11:00, 1 01:45:15+10:30"),
    ],
    ("Asia/Tokyo", "none"): [  # no change
        ("30 2 * * *", "-1 00:00+09:00", "-1 02:30+09:00, 0 02:30+09:00, 1 02:30+09:00"),
        ("0 * * * *", "0 01:30+09:00", "0 02:00+09:00, 0 03:00+09:00"),
        ("30 * * * *", "0 01:45+09:00", "0 02:30+09:00, 0 03:30+09:00"),
        ("*/15 * * * *", "0 01:40+09:00", "0 01:45+09:00, 0 02:00+09:00, 0 02:15+09:00"),
        ("* * * * * */30", "0 01:59:00+09:00", "0 01:59:30+09:00, 0 02:00:00+09:00"),
        ("30 2 * * * 15", "-1 00:00+09:00", "-1 02:30:15+09:00, 0 02:30:15+09:00"),
    ],
}
CASES = [(zone, change, *row) for (zone, change), rows in AROUND_CHANGES.items() for row in rows]

EXPRESSIONS = [
    "30 2 * * *",
    "45 1 * * *",
    "15 2 * * *",
    "0 6 * * *",
    "0,30 1-3 * * *",
    "0 * * * *",
    "30 * * * *",
    "*/15 * * * *",
    "*/20 2 * * *",
    "* * * * * */30",
    "30 2 * * * 15",
    "45 1 * * * */20",
]


def at(day: str, year: int, zone: str, change: str) -> int:
    """Epoch ms of ``"-1 02:30+01:00"``: a local time with its offset, days after the change."""
    days, clock = day.split(" ")
    local_date = date.fromisoformat(CHANGE_DAYS[zone][change][year]) + timedelta(days=int(days))
    return int(datetime.fromisoformat(f"{local_date.isoformat()}T{clock}").timestamp() * 1000)


def chain(schedule: CronSchedule, start: int, count: int) -> List[int]:
    out = [schedule.next_after(start)]
    while len(out) < count:
        out.append(schedule.next_after(out[-1]))
    return out


@pytest.mark.parametrize("year", [2026, 2027])
@pytest.mark.parametrize(
    "zone, change, expression, start, expected",
    CASES,
    ids=[f"{zone.split('/')[1]}-{change}-{expr}" for zone, change, expr, _, _ in CASES],
)
def test_slots_around_a_change_of_time(
    zone: str, change: str, expression: str, start: str, expected: str, year: int
) -> None:
    """The slots after a time around a change of time are the hand-computed instants; at_or_before
    gives each back, and the one before it just before it."""
    schedule = CronSchedule(expression, zone)
    slots = [at(x, year, zone, change) for x in expected.split(", ")]
    assert chain(schedule, at(start, year, zone, change), len(slots)) == slots
    for previous, slot in zip(slots, slots[1:]):
        assert schedule.at_or_before(slot) == slot
        assert schedule.at_or_before(slot - 1) == previous


@pytest.mark.parametrize("expression", EXPRESSIONS)
@pytest.mark.parametrize("zone, change", CHANGES_UTC, ids=[f"{z.split('/')[1]}-{t[:10]}" for z, t in CHANGES_UTC])
def test_next_after_and_at_or_before_agree_across_a_change(zone: str, change: str, expression: str) -> None:
    """Over hours around each change, next_after and at_or_before list the same slots, in
    increasing order, and another instance starting anywhere in between computes the same."""
    ours, theirs = CronSchedule(expression, zone), CronSchedule(expression, zone)
    middle = int(datetime.fromisoformat(change).timestamp() * 1000)
    reach = (15 if len(expression.split()) == 6 else 4 * 60) * 60_000
    first = ours.at_or_before(middle - reach)
    assert first is not None
    slots = [first]
    while slots[-1] <= middle + reach:
        slots.append(ours.next_after(slots[-1]))
    assert all(a < b for a, b in zip(slots, slots[1:])), slots
    for previous, slot in zip(slots, slots[1:]):
        between = previous + (slot - previous) // 2
        assert theirs.next_after(previous) == slot
        assert theirs.next_after(slot - 1) == slot
        assert theirs.next_after(between) == slot
        assert theirs.at_or_before(slot) == slot
        assert theirs.at_or_before(slot - 1) == previous
        assert theirs.at_or_before(between) == previous
