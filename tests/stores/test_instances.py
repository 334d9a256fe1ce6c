"""Instances in the store, against every store (the ``store`` fixture).

``announce`` keeps a started instance's announcement stamped on the store's clock (``started_ms``
at its first, ``seen_ms`` at each refresh), ``withdraw`` forgets it, ``instances`` reads the live
ones, a killed instance's ages out ``instance_ttl_ms`` after its last refresh, and ``poll`` with
an announcement refreshes it in the same call. Everything is checked before the store is asked.
"""

from __future__ import annotations

import dataclasses

import pytest

from leasecron import ConfigError, Store
from leasecron.announcements import (
    MAX_ANNOUNCEMENT_BYTES,
    AnnouncedJob,
    Announcement,
    LiveInstance,
    announcement_of,
)
from tests.helpers import wait_for

#: A short time to live, so that aging out is seen in a test (the stores' default is 30 s).
SHORT_TTL_MS = 400


def made(runner: str = "web-1:4242:ab12", **changes: object) -> Announcement:
    """An announcement of two code jobs and one task, with ``changes``."""
    jobs = [("report", "*/5 * * * *", "Europe/Berlin"), ("clean-ups ✓", "30", "UTC")]
    return dataclasses.replace(announcement_of(runner, "web-1", 4242, "0.3.0", jobs, ["send_report"]), **changes)


def only(store: Store) -> LiveInstance:
    """The one live instance the store holds."""
    (instance,) = store.instances()
    return instance


def test_a_new_store_has_no_instances(store: Store) -> None:
    assert store.instances() == []


def test_an_announcement_is_read_back_whole_stamped_on_the_stores_clock(store: Store) -> None:
    """Every field round-trips (a name in Unicode, an interval's text); started = seen = the store's now."""
    before = store.now_ms()
    store.announce(made())
    after = store.now_ms()
    instance = only(store)
    assert instance.announcement == made()
    assert instance.runner == "web-1:4242:ab12"
    assert before <= instance.started_ms == instance.seen_ms <= after
    assert instance.schedules()["clean-ups ✓"] == AnnouncedJob("clean-ups ✓", "30", "UTC")
    assert instance.to_dict()["jobs"][0] == {"name": "clean-ups ✓", "schedule": "30", "tz": "UTC"}


def test_a_refresh_keeps_the_start_and_moves_seen_and_the_body(store: Store) -> None:
    store.announce(made())
    first = only(store)
    wait_for(lambda: store.now_ms() > first.seen_ms + 5)
    store.announce(made(version="0.3.1", tasks=()))
    again = only(store)
    assert again.started_ms == first.started_ms
    assert again.seen_ms > first.seen_ms
    assert (again.announcement.version, again.announcement.tasks) == ("0.3.1", ())


def test_instances_are_listed_oldest_start_first(store: Store) -> None:
    store.announce(made("b-runner"))
    wait_for(lambda: store.now_ms() > only(store).started_ms + 2)
    store.announce(made("a-runner"))
    store.announce(made("b-runner"))  # a refresh does not move its start
    assert [instance.runner for instance in store.instances()] == ["b-runner", "a-runner"]


def test_withdraw_forgets_one_instance_and_an_unknown_runner_is_no_error(store: Store) -> None:
    store.announce(made("one"))
    store.announce(made("two"))
    store.withdraw("one")
    store.withdraw("never-announced")
    assert [instance.runner for instance in store.instances()] == ["two"]


def test_a_killed_instance_ages_out_and_a_new_announcement_starts_anew(store: Store) -> None:
    """Not refreshed within the time to live: not listed; announced again: a new start."""
    store.instance_ttl_ms = SHORT_TTL_MS
    store.announce(made("killed"))
    first = only(store)
    store.announce(made("alive"))
    wait_for(lambda: [i.runner for i in store.instances()] == ["alive"] or store.announce(made("alive")), 5.0)
    store.announce(made("killed"))
    back = [i for i in store.instances() if i.runner == "killed"]
    assert len(back) == 1 and back[0].started_ms >= first.seen_ms + SHORT_TTL_MS


def test_a_poll_with_an_announcement_refreshes_it_and_answers_the_poll(store: Store) -> None:
    request = store.request_run("report", by="ops")
    store.set_schedule("report", by="ops", schedule="*/5 * * * *")
    polled = store.poll(0, announce=made())
    assert [r.slot_ms for r in polled.requests] == [request.slot_ms]
    assert [c.job for c in polled.schedules.changes] == ["report"]
    assert only(store).announcement == made()
    assert store.poll(polled.schedules.cursor).schedules.changes == ()


@pytest.mark.parametrize(
    "bad, words",
    [
        ("web-1", "must be an Announcement"),
        (made(runner=""), "runner must be a non-empty string"),
        (made(pid=-1), "pid must be an integer"),
        (made(host="a\x00b"), "host must not contain a NUL"),
        (made(jobs=(AnnouncedJob("", "30", "UTC"),)), "job name must be a non-empty string"),
        (made(jobs=(AnnouncedJob("j", "30", "UTC"),) * (MAX_ANNOUNCEMENT_BYTES // 16)), "at most 1048576 bytes"),
    ],
)
def test_a_bad_announcement_is_refused_before_the_store_is_asked(store: Store, bad: object, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        store.announce(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=words):
        store.poll(0, announce=bad)  # type: ignore[arg-type]
    assert store.instances() == []


def test_withdraw_refuses_a_runner_that_is_not_text(store: Store) -> None:
    with pytest.raises(ConfigError, match="runner must be a string"):
        store.withdraw(7)  # type: ignore[arg-type]
