"""Stored schedules, rule by rule, against every store (the ``store`` fixture).

Rule 24 (``set_schedule``): an override, a stored job or back to the code's schedule, each
change one atomic step raising the job's version, stamped on the store's clock; rule 23: a
scheduled or catch-up claim of a new run from an older version is answered ``stale`` and writes
nothing, a manual claim and the claims of a slot that has a run are decided as before; the reads
``stored_schedule``, ``schedule_changes`` (what changed after a cursor) and ``poll`` (requests and
changes in one call); and the checks before anything is stored.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from leasecron import ConfigError, Store
from leasecron.stores.base import ClaimRequest
from leasecron.stored import ScheduleChanges, StoredSchedule
from tests.stores.test_contract import JOB, LONG, claim, kill, win

#: A cron string and zone that every test may store.
EVERY_5 = "*/5 * * * *"
BERLIN = "Europe/Berlin"


def slot_of(store: Store) -> int:
    """A slot a second ago, on the store's clock (neither early nor late)."""
    return store.now_ms() - 1000


def override(store: Store, job: str = JOB, schedule: Any = EVERY_5, **kwargs: Any) -> StoredSchedule:
    """Store an override of ``job``'s schedule by ``ops``."""
    return store.set_schedule(job, by="ops", schedule=schedule, **kwargs)


def put(store: Store, job: str = "report-3", **kwargs: Any) -> StoredSchedule:
    """Store a whole job bound to the task ``send_report``."""
    kwargs.setdefault("schedule", "0 9 * * 1-5")
    return store.set_schedule(job, by="app", task="send_report", **kwargs)


# -- rule 24: set_schedule -------------------------------------------------------------------------


def test_a_job_has_no_stored_schedule_until_one_is_set(store: Store) -> None:
    """stored_schedule is None, and schedule_changes(0) is empty at cursor 0."""
    assert store.stored_schedule(JOB) is None
    assert store.schedule_changes(0) == ScheduleChanges(0, ())


def test_an_override_is_stored_as_version_1_by_whom_and_when_on_the_stores_clock(store: Store) -> None:
    """The record: version 1, source override, the schedule and zone, by, and the store's now."""
    before = store.now_ms()
    record = override(store, tz=BERLIN)
    after = store.now_ms()
    assert (record.job, record.version, record.source, record.schedule, record.tz) == (
        JOB, 1, "override", EVERY_5, BERLIN)  # fmt: skip
    assert (record.task, dict(record.kwargs), dict(record.options), record.updated_by) == (None, {}, {}, "ops")
    assert before <= record.updated_ms <= after and record.active
    assert store.stored_schedule(JOB) == record


def test_every_change_raises_the_version_and_a_reset_keeps_the_record(store: Store) -> None:
    """override (1), another override (2), back to the code (3: source code, nothing else kept), again (4)."""
    assert override(store).version == 1
    assert override(store, schedule=30, tz=None).version == 2
    reset = store.set_schedule(JOB, by="ops2")
    assert (reset.version, reset.source, reset.schedule, reset.tz, reset.task, reset.updated_by) == (
        3, "code", None, None, None, "ops2")  # fmt: skip
    assert not reset.active and store.stored_schedule(JOB) == reset
    assert override(store).version == 4


def test_a_stored_job_keeps_its_task_kwargs_and_options_exactly(store: Store) -> None:
    """kwargs and options come back as the same JSON: nested, Unicode, large integers, null."""
    kwargs: Dict[str, Any] = {"team": 3, "to": ["ä@example.com", "b"], "deep": {"n": 2**53, "x": None, "f": 0.5}}
    record = put(store, tz=BERLIN, kwargs=kwargs, options={"lease_ms": 5000, "overlap": "allow"})
    assert (record.source, record.task, record.schedule, record.tz) == ("stored", "send_report", "0 9 * * 1-5", BERLIN)
    found = store.stored_schedule("report-3")
    assert found == record and dict(found.kwargs) == kwargs
    assert dict(found.options) == {"lease_ms": 5000, "overlap": "allow"}
    job = found.as_job()
    assert (job.name, job.task, job.kwargs, job.version) == ("report-3", "send_report", kwargs, 1)


def test_an_interval_is_stored_as_its_seconds(store: Store) -> None:
    """30 -> '30', 0.5 -> '0.5'."""
    assert override(store, schedule=30).schedule == "30"
    assert override(store, "half", schedule=0.5).schedule == "0.5"


def test_names_that_look_alike_keep_schedules_of_their_own(store: Store) -> None:
    """Job names with separators and braces never share a stored schedule."""
    names = ["a", "a:b", "a}:{b", "{a}", "a b", "ä"]
    for number, name in enumerate(names, 1):
        override(store, name, schedule=number)
    assert [store.stored_schedule(name).schedule for name in names] == [str(n) for n in range(1, len(names) + 1)]


# -- schedule_changes and poll ---------------------------------------------------------------------


def test_schedule_changes_lists_what_changed_after_the_cursor_newest_per_job(store: Store) -> None:
    """Each change moves the cursor on; a job changed twice is listed once (its newest), in the order
    of the changes; nothing changed: the same cursor and no records."""
    a1 = override(store, "a")
    first = store.schedule_changes(0)
    assert first.changes == (a1,) and first.cursor > 0
    assert store.schedule_changes(first.cursor) == ScheduleChanges(first.cursor, ())
    b1 = put(store, "b")
    a2 = store.set_schedule("a", by="ops")
    second = store.schedule_changes(first.cursor)
    assert second.changes == (b1, a2) and second.cursor > first.cursor
    assert store.schedule_changes(0).changes == (b1, a2)
    assert store.schedule_changes(second.cursor) == ScheduleChanges(second.cursor, ())


def test_poll_brings_the_pending_requests_and_the_schedule_changes(store: Store) -> None:
    """poll(cursor): pending_requests() and schedule_changes(cursor) in one answer."""
    made = store.request_run(JOB, by="ops")
    record = override(store)
    polled = store.poll(0)
    assert [r.slot_ms for r in polled.requests] == [made.slot_ms]
    assert polled.schedules.changes == (record,)
    assert store.poll(polled.schedules.cursor).schedules.changes == ()


# -- rule 23: a claim from an older version is stale -----------------------------------------------


@pytest.mark.parametrize("reason", ["schedule", "catch-up"])
def test_a_new_claim_from_an_older_version_is_stale_and_writes_nothing(store: Store, reason: str) -> None:
    """Version 0 after a change: stale, no run; the same claim from the new version wins."""
    slot = slot_of(store)
    record = override(store)
    answer = claim(store, slot, reason=reason)
    assert (answer.outcome, answer.run) == ("stale", None)
    assert store.get_run(JOB, slot) is None and store.jobs() == []
    assert win(store, slot, reason=reason, version=record.version).attempt == 1


def test_a_claim_from_the_current_or_a_newer_version_is_decided_as_before(store: Store) -> None:
    """Version 2 when the store holds 2, or any version of a job never changed: won."""
    override(store)
    override(store)
    assert win(store, slot_of(store), version=2).attempt == 1
    assert win(store, slot_of(store), job="other", version=7).attempt == 1


def test_a_deleted_stored_job_answers_its_old_claims_stale(store: Store) -> None:
    """put (1), delete (2): a claim from version 1 is stale."""
    put(store)
    store.set_schedule("report-3", by="app")
    assert claim(store, slot_of(store), job="report-3", version=1).outcome == "stale"


def test_a_manual_claim_is_not_fenced(store: Store) -> None:
    """A request made before or after a change runs from any version."""
    override(store)
    made = store.request_run(JOB, by="ops")
    answer = store.claim(JOB, made.slot_ms, runner="m1", reason="manual", version=0)
    assert answer.outcome == "won"


def test_a_slot_that_has_a_run_is_decided_as_before_whatever_the_version(store: Store) -> None:
    """A run started before the change goes on: its retry wins again, another claim is running,
    and once its runner died a takeover from the old version wins the next attempt."""
    slot = slot_of(store)
    run = win(store, slot, token="t1", lease_ms=LONG)
    override(store)
    assert claim(store, slot, token="t1", lease_ms=LONG).outcome == "won"  # rule 2
    assert claim(store, slot, runner="r2").outcome == "running"  # rule 3
    kill(store, store.get_run(JOB, slot) or run)
    taken = claim(store, slot, runner="r2", reason="takeover")
    assert (taken.outcome, taken.run.attempt) == ("won", 2)


def test_stale_comes_before_paused(store: Store) -> None:
    """A paused job rescheduled: its old-version claim is stale, its new-version claim paused."""
    store.pause(JOB, by="ops")
    record = override(store)
    assert claim(store, slot_of(store)).outcome == "stale"
    assert claim(store, slot_of(store), version=record.version).outcome == "paused"


def test_a_batch_answers_each_old_version_stale(store: Store) -> None:
    """claim_many: the claims from the old version stale, the others decided as alone."""
    slot = slot_of(store)
    record = override(store, "a")
    answers = store.claim_many([
        ClaimRequest("a", slot, "r1"),
        ClaimRequest("a", slot, "r1", version=record.version),
        ClaimRequest("b", slot, "r1"),
    ])  # fmt: skip
    assert [a.outcome for a in answers] == ["stale", "won", "won"]


# -- checks before anything is stored --------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, says",
    [
        (dict(schedule="61 * * * *"), "cron"),
        (dict(schedule="not cron"), "cron"),
        (dict(schedule=EVERY_5, tz="Mars/Olympus"), "zone"),
        (dict(schedule=0), "positive"),
        (dict(schedule=EVERY_5, kwargs={"a": 1}), "task"),
        (dict(schedule=EVERY_5, task="t", kwargs={"a": object()}), "JSON"),
        (dict(schedule=EVERY_5, task="t", kwargs=[1]), "JSON object"),
        (dict(schedule=EVERY_5, task="t", kwargs={"a": float("nan")}), "JSON"),
        (dict(schedule=EVERY_5, task="t", options={"lease_ms": 0}), "lease_ms"),
        (dict(schedule=EVERY_5, task="t", options={"colour": 1}), "unknown job option"),
        (dict(schedule=EVERY_5, task="t", options={"poll_ms": 100}), "unknown job option"),
        (dict(schedule=EVERY_5, task=""), "task"),
        (dict(tz=BERLIN), "takes no tz"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_fields_are_refused_before_anything_is_stored(store: Store, fields: Dict[str, Any], says: str) -> None:
    """ConfigError naming what is wrong; nothing stored, the cursor unchanged."""
    with pytest.raises(ConfigError, match=says):
        store.set_schedule(JOB, by="ops", **fields)
    assert store.stored_schedule(JOB) is None and store.schedule_changes(0).cursor == 0


def test_a_bad_version_or_cursor_is_refused(store: Store) -> None:
    """A negative or non-integer version or cursor is a ConfigError."""
    with pytest.raises(ConfigError, match="version"):
        claim(store, slot_of(store), version=-1)
    with pytest.raises(ConfigError, match="since"):
        store.schedule_changes(-1)
    with pytest.raises(ConfigError, match="since"):
        store.poll("1")  # type: ignore[arg-type]
