"""Invalid schedules, options and store URLs (issue 5, item 6: "Bad input").

``tests/engine/test_config.py`` covers the common mistakes; this module goes where it stops:
out-of-range cron fields of every kind, cron strings no slot satisfies, huge and infinite
intervals, absurd option values (2**60), wrong types at both levels, and malformed URLs of
every store. The promise: each fails at once — at registration, at ``LeaseCron()`` or at
``open_store()`` — with ``ConfigError`` (a ``ValueError``) whose short message names the job
and the option, or the part of the URL that is wrong; never a driver's exception, never later
at the first store call, and never with a password in the message.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Dict

import pytest

import leasecron
from leasecron import ConfigError, LeaseCron, MemoryStore
from leasecron.options import OPTION_NAMES

INT_OPTIONS = [name for name in OPTION_NAMES if name not in ("overlap", "tz")]


@pytest.fixture
def cron() -> LeaseCron:
    return LeaseCron(MemoryStore(), runner="r")


def _refused(cron: LeaseCron, schedule: Any, **options: Any) -> str:
    """Register a job called "the-job"; assert ConfigError naming it, and nothing registered."""
    with pytest.raises(ConfigError) as info:
        cron.add_job(lambda: None, schedule, name="the-job", **options)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "the-job" in message and len(message) < 400, message
    assert cron.jobs == {}
    return message


BAD_CRON = [
    "* 24 * * *",  # hour
    "* * 32 * *",  # day of month
    "* * 0 * *",
    "* * * 13 *",  # month
    "* * * 0 *",
    "* * * * 8",  # day of week
    "* * * * * 60",  # seconds (the sixth field)
    "-1 * * * *",
    "*/0 * * * *",  # a zero step
    "1-2-3 * * * *",
    "0 0 30 2 *",  # 30 February: never fires
    "0 0 31 4 *",  # 31 April: never fires
    "@reboot",
    "@every 5s",
    "* * * *",
    "* * * * * * * *",
    "\x00",
    "* * * * *\n* * * * *",
    "x" * 100_000,
    "",
]


@pytest.mark.parametrize("schedule", BAD_CRON, ids=[repr(s)[:30] for s in BAD_CRON])
def test_bad_cron_strings_are_refused_at_registration(cron: LeaseCron, schedule: str) -> None:
    """A cron string with a field out of range, a bad step, no slot at all, or no cron syntax is
    a ConfigError naming the job and its schedule, in a short message even for 100 KB of text."""
    assert "schedule" in _refused(cron, schedule)


BAD_INTERVALS = [
    float("inf"),
    float("-inf"),
    float("nan"),
    2**60,  # seconds: far beyond 2**50 ms
    1e300,
    timedelta.max,
    timedelta(days=-1),
    timedelta(0),
    -1,
    0.0005,  # half a millisecond
]


@pytest.mark.parametrize("schedule", BAD_INTERVALS, ids=[repr(s)[:30] for s in BAD_INTERVALS])
def test_bad_intervals_are_refused_at_registration(cron: LeaseCron, schedule: Any) -> None:
    """An interval that is infinite, not a number, not positive, not a whole number of
    milliseconds or longer than 2**50 ms is a ConfigError naming the job and its schedule."""
    message = _refused(cron, schedule)
    assert "schedule" in message and "interval" in message


def test_the_longest_interval_is_accepted(cron: LeaseCron) -> None:
    """An interval of exactly 2**50 ms (some 35 000 years) is valid; its first slot lies ahead."""
    job = cron.add_job(lambda: None, timedelta(milliseconds=2**50), name="rare")
    assert job.schedule.next_after(0) == 2**50


@pytest.mark.parametrize("option", INT_OPTIONS)
@pytest.mark.parametrize("value", [2**60, 2**50 + 1, "1000", 1000.0, True, False, None, [1000]])
def test_absurd_or_mistyped_integer_options_are_refused_on_jobs(cron: LeaseCron, option: str, value: Any) -> None:
    """Every integer option refuses 2**60, a string, a float, a bool, None and a list on a job:
    ConfigError naming the job and the option (heartbeat_ms and lease_margin_ms alone may be
    None: derived, and timeout_ms: no limit)."""
    if option in ("heartbeat_ms", "lease_margin_ms", "timeout_ms") and value is None:
        job = cron.add_job(lambda: None, 60, name="the-job", **{option: None})
        assert job.options.heartbeat_ms > 0 and job.options.lease_margin_ms > 0
        assert job.options.timeout_ms is None
        return
    assert option in _refused(cron, 60, **{option: value})


@pytest.mark.parametrize("option", INT_OPTIONS)
@pytest.mark.parametrize("value", [2**60, "1000", True, 1000.0])
def test_absurd_or_mistyped_integer_options_are_refused_on_the_instance(option: str, value: Any) -> None:
    """The same values given to LeaseCron() as defaults fail at construction, naming the option."""
    with pytest.raises(ConfigError, match=option):
        LeaseCron(MemoryStore(), runner="r", **{option: value})


@pytest.mark.parametrize(
    "options",
    [
        {"lease_ms": 3, "heartbeat_ms": 2},
        {"lease_ms": 2_000, "heartbeat_ms": 1_000},
        {"lease_ms": 2_000, "heartbeat_ms": 5_000},
        {"lease_ms": 2**50, "heartbeat_ms": 2**49},
    ],
)
def test_heartbeat_not_under_half_the_lease_is_refused(cron: LeaseCron, options: Dict[str, int]) -> None:
    """heartbeat_ms must be under lease_ms / 2, also at the extremes."""
    assert "the-job': heartbeat_ms (" in _refused(cron, 60, **options)


@pytest.mark.parametrize("options", [{"lease_ms": 1}, {"lease_ms": 2}, {"lease_ms": 2, "heartbeat_ms": 1}])
def test_a_lease_no_heartbeat_fits_is_blamed_on_lease_ms(cron: LeaseCron, options: Dict[str, int]) -> None:
    """A lease under 3 ms, where no heartbeat of at least 1 ms is under half of it, is refused
    naming lease_ms, not a heartbeat_ms derived from it."""
    assert "the-job': lease_ms must be >= 3" in _refused(cron, 60, **options)


@pytest.mark.parametrize("name", ["lease", "leaseMs", "timeout", "stop_timeout_ms", "runner", "claim_threads"])
def test_unknown_and_instance_only_options_are_refused_on_jobs(cron: LeaseCron, name: str) -> None:
    """A job option that does not exist (or exists on LeaseCron only) is a ConfigError listing the known ones."""
    message = _refused(cron, 60, **{name: 1})
    assert name in message and "known: lease_ms" in message


@pytest.mark.parametrize("value", [5, "", "Mars/Olympus", "../../etc/passwd", "UTC\x00", "UTC\ud800", "x" * 10_000])
def test_bad_time_zones_are_refused(cron: LeaseCron, value: Any) -> None:
    """tz must name an IANA zone: a path, a NUL, a surrogate or 10 KB of text is a ConfigError naming tz."""
    assert "tz" in _refused(cron, "0 6 * * *", tz=value)


@pytest.mark.parametrize("value", [None, "", 1, "Skip", "queue", ["skip"]])
def test_bad_overlap_values_are_refused(cron: LeaseCron, value: Any) -> None:
    """overlap is "skip" or "allow", exactly."""
    assert "overlap" in _refused(cron, 60, overlap=value)


@pytest.mark.parametrize("value", [-1, 1.5, "10", True, 2**60])
def test_bad_stop_timeout_and_claim_threads_are_refused(value: Any) -> None:
    """stop_timeout_ms and claim_threads refuse negatives, fractions, strings, bools and more than 2**50."""
    for name in ("stop_timeout_ms", "claim_threads"):
        with pytest.raises(ConfigError, match=name):
            LeaseCron(MemoryStore(), runner="r", **{name: value})


BAD_URLS = [
    # (url, a part of the URL or a phrase the message must name)
    ("redis://:notaport", "notaport"),
    ("redis://127.0.0.1:99999/0", "Port out of range"),
    ("redis://127.0.0.1:-1/0", "-1"),
    ("redis://127.0.0.1:6379/notadb", "notadb"),
    ("valkey://127.0.0.1:6379/0/1", "0/1"),
    ("redis://127.0.0.1:6379/0?socket_timeout=soon", "socket_timeout"),
    ("redis://127.0.0.1:6379/0?cluster=maybe", "maybe"),
    ("redis://127.0.0.1:6379/0?prefix=a{b}", "prefix"),
    ("redis://127.0.0.1:6379/0?prefix=", "prefix"),
    ("redis://[::1/0", "IPv6"),
    ("postgresql://host:99999/db", "99999"),
    ("postgresql://127.0.0.1:notaport/db", "notaport"),
    ("postgresql://127.0.0.1:0/db", "port"),
    ("postgres://127.0.0.1:5432/test?max_connections=many", "max_connections"),
    ("postgres://127.0.0.1:5432/test?max_connections=0", "max_connections"),
    ("postgresql://127.0.0.1:5432/test?schema=bad-name", "schema"),
    ("postgresql://127.0.0.1:5432/test?table=" + "t" * 49, "table"),
    ("postgresql://[::1/db", "IPv6"),
    ("sqlite://", "names no file"),
    ("sqlite:///", "names no file"),
    ("sqlite://host/x.db", "host part"),
    ("sqlite:///x.db?busy_timeout_ms=-5", "busy_timeout_ms"),
    ("sqlite:///x.db?busy_timeout_ms=soon", "busy_timeout_ms"),
    ("sqlite:///x.db?table=a;drop", "table"),
    ("sqlite:///x.db?journal=delete", "journal"),
    ("mysql://localhost/db", "mysql"),
    ("http://example.com", "http"),
    ("://nothing", "scheme"),
    ("redis", "scheme://"),
    ("", "scheme://"),
]


@pytest.mark.parametrize("url, part", BAD_URLS, ids=[u or "empty" for u, _ in BAD_URLS])
def test_malformed_store_urls_are_refused_by_open_store(url: str, part: str) -> None:
    """open_store and LeaseCron(url) refuse a malformed URL at once with ConfigError naming the
    bad part; no store call is needed to find out (nothing here is reachable on purpose)."""
    with pytest.raises(ConfigError) as info:
        leasecron.open_store(url)
    assert isinstance(info.value, ValueError)
    assert part in str(info.value), str(info.value)
    with pytest.raises(ConfigError):
        LeaseCron(url, runner="r")


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2@127.0.0.1:notaport/0",
        "redis://user:hunter2@127.0.0.1:6379/notadb",
        "rediss://:hunter2@[::1/0",
        "postgresql://app:hunter2@127.0.0.1:99999/db",
        "postgresql://app:hunter2@[::1/db",
        "postgresql://app@127.0.0.1:5432/db?password=hunter2&max_connections=x",
    ],
)
def test_a_refused_url_never_shows_its_password(url: str) -> None:
    """The ConfigError of a malformed URL with a password names the URL with the password masked."""
    with pytest.raises(ConfigError) as info:
        leasecron.open_store(url)
    assert "hunter2" not in str(info.value), str(info.value)
