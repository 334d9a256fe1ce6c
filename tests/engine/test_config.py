"""Options and registration: defaults, overrides, and ConfigError."""

from __future__ import annotations

import dataclasses
import inspect
import os
import socket
from datetime import timedelta
from typing import Any, Dict

import pytest

import leasecron
from leasecron import ConfigError, LeaseCron, MemoryStore
from leasecron.cli import worker
from leasecron.options import DEFAULTS, OPTIONS, JobOptions
from tests.conftest import Backend


def noop() -> None:
    pass


def noop_ctx(ctx: leasecron.Context) -> None:
    pass


@pytest.fixture
def cron() -> LeaseCron:
    c = LeaseCron(MemoryStore(), runner="r")
    yield c
    c.stop(timeout=0)


#: The defaults the spec documents (heartbeat_ms: min(5 000, lease_ms // 6) of the default lease).
DOCUMENTED_DEFAULTS: Dict[str, Any] = {
    "lease_ms": 30_000, "heartbeat_ms": 5_000, "max_attempts": 3, "overlap": "skip", "catch_up_ms": 300_000,
    "max_late_ms": 30_000, "jitter_ms": 1_000, "history_size": 100, "tz": "UTC", "timeout_ms": None, "retries": 0,
    "retry_delay_ms": 1_000, "lease_margin_ms": 3_000,
}  # fmt: skip


def test_every_option_has_its_documented_default(cron: LeaseCron) -> None:
    """Each option left unset takes its documented default; stop_timeout_ms defaults to 10 000."""
    cron.add_job(noop, 60, name="j")
    assert dataclasses.asdict(cron.jobs["j"].options) == DOCUMENTED_DEFAULTS
    assert (cron.stop_timeout_ms, cron.poll_ms) == (10_000, 1_000)


def test_the_signature_of_lease_cron_is_the_table_of_options() -> None:
    """LeaseCron's keyword parameters are the options of leasecron.options.OPTIONS, in its order: a
    job option defaults to None (not set: the job default applies), an instance option to its default."""
    parameters = list(inspect.signature(LeaseCron.__init__).parameters.values())
    assert [p.name for p in parameters[:3]] == ["self", "store", "runner"]
    keyword = parameters[3:]
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY for p in keyword)
    assert [p.name for p in keyword] == [option.name for option in OPTIONS]
    assert [p.default for p in keyword] == [option.default if not option.job else None for option in OPTIONS]
    assert [f.name for f in dataclasses.fields(JobOptions)] == [option.name for option in OPTIONS if option.job]
    assert {name: DEFAULTS[name] for name in ("lease_ms", "overlap", "retries")} == {
        "lease_ms": 30_000, "overlap": "skip", "retries": 0,
    }  # fmt: skip


def test_the_flask_config_keys_and_the_worker_flags_are_the_options() -> None:
    """Each option is a Flask config key LEASECRON_<NAME> and a flag --<name> of the demo's worker."""
    flask = pytest.importorskip("leasecron.contrib.flask")
    assert {key: name for key, name in flask.CONFIG_KEYS.items() if name not in ("store", "runner")} == {
        f"LEASECRON_{option.name.upper()}": option.name for option in OPTIONS
    }
    args = worker.parse_args(["--store", "memory://", "--runner", "r", "--poll-ms", "7", "--overlap", "allow"])
    assert all(hasattr(args, option.name) for option in OPTIONS)
    assert (args.poll_ms, args.overlap, args.retries) == (7, "allow", 0)
    with pytest.raises(SystemExit):
        worker.parse_args(["--store", "memory://", "--runner", "r", "--overlap", "sometimes"])


#: A job that overrides every option but the tries: what it runs with.
OVERRIDES: Dict[str, Any] = {
    "lease_ms": 2_000, "heartbeat_ms": 300, "max_attempts": 1, "overlap": "skip", "catch_up_ms": 0,
    "max_late_ms": 1_000, "jitter_ms": 0, "history_size": 5, "tz": "Europe/Berlin",
}  # fmt: skip


def test_job_overrides_replace_instance_defaults() -> None:
    """A job's options override the LeaseCron defaults; other jobs keep the defaults."""
    cron = LeaseCron(MemoryStore(), runner="r", lease_ms=60_000, max_attempts=5, overlap="allow", jitter_ms=7)
    cron.add_job(noop, 60, name="plain")
    cron.add_job(noop, 60, name="own", **OVERRIDES)
    plain, own = cron.jobs["plain"].options, cron.jobs["own"].options
    assert (plain.lease_ms, plain.heartbeat_ms, plain.max_attempts, plain.overlap, plain.jitter_ms) == (
        60_000, 5_000, 5, "allow", 7,
    )  # fmt: skip
    assert (plain.catch_up_ms, plain.max_late_ms, plain.history_size, plain.tz) == (300_000, 30_000, 100, "UTC")
    assert own == JobOptions(**OVERRIDES, lease_margin_ms=200)  # derived: a tenth of its lease


@pytest.mark.parametrize(
    "lease_ms, heartbeat_ms",
    [(30_000, 5_000), (60_000, 5_000), (12_000, 2_000), (600, 100), (6, 1), (3, 1)],
)
def test_heartbeat_is_derived_from_the_jobs_own_lease(lease_ms: int, heartbeat_ms: int) -> None:
    """heartbeat_ms defaults to min(5 000, lease_ms // 6) of the job's own lease, wherever the lease is set."""
    on_job = LeaseCron(MemoryStore(), runner="r", heartbeat_ms=None)
    on_job.add_job(noop, 60, name="j", lease_ms=lease_ms)
    assert on_job.jobs["j"].options.heartbeat_ms == heartbeat_ms
    on_instance = LeaseCron(MemoryStore(), runner="r", lease_ms=lease_ms)
    on_instance.add_job(noop, 60, name="j")
    assert on_instance.jobs["j"].options.heartbeat_ms == heartbeat_ms


def test_instance_heartbeat_default_applies_to_jobs_with_a_longer_lease() -> None:
    """An instance-level heartbeat_ms is used by a job that overrides only its lease."""
    cron = LeaseCron(MemoryStore(), runner="r", heartbeat_ms=700)
    cron.add_job(noop, 60, name="j", lease_ms=2_000)
    assert cron.jobs["j"].options.heartbeat_ms == 700


@pytest.mark.parametrize(
    "lease_ms, heartbeat_ms, margin_ms",
    [(30_000, 5_000, 3_000), (3_000, 500, 300), (600, 100, 60), (1_000, 100, 100), (1_000, 450, 100),
     (1_000, 499, 2), (3, 1, 0)],
)  # fmt: skip
def test_the_lease_margin_is_derived_from_the_jobs_lease_and_heartbeat(
    lease_ms: int, heartbeat_ms: int, margin_ms: int
) -> None:
    """lease_margin_ms defaults to one heartbeat, at most a tenth of the lease, and at most
    lease_ms - 2 * heartbeat_ms: an explicit heartbeat close to half the lease still fits."""
    cron = LeaseCron(MemoryStore(), runner="r")
    cron.add_job(noop, 60, name="j", lease_ms=lease_ms, heartbeat_ms=heartbeat_ms)
    assert cron.jobs["j"].options.lease_margin_ms == margin_ms


def test_a_lease_margin_must_leave_two_heartbeats_of_the_lease() -> None:
    """An explicit lease_margin_ms up to lease_ms - 2 * heartbeat_ms is taken (0 too: no margin);
    a larger one is refused, naming the job, the option and the bound."""
    cron = LeaseCron(MemoryStore(), runner="r", lease_ms=3_000, heartbeat_ms=500)
    cron.add_job(noop, 60, name="edge", lease_margin_ms=2_000)
    cron.add_job(noop, 60, name="none", lease_margin_ms=0)
    assert (cron.jobs["edge"].options.lease_margin_ms, cron.jobs["none"].options.lease_margin_ms) == (2_000, 0)
    with pytest.raises(ConfigError, match=r"job 'wide': lease_margin_ms \(2001\) must be at most lease_ms - 2"
                       r" \* heartbeat_ms \(2000\)"):  # fmt: skip
        cron.add_job(noop, 60, name="wide", lease_margin_ms=2_001)
    with pytest.raises(ConfigError, match=r"LeaseCron: lease_margin_ms \(701\) must be at most"):
        LeaseCron(MemoryStore(), runner="r", lease_ms=1_000, heartbeat_ms=150, lease_margin_ms=701)
    with pytest.raises(ConfigError, match="lease_margin_ms must be >= 0"):
        cron.add_job(noop, 60, name="negative", lease_margin_ms=-1)


BAD_JOB_OPTIONS = [
    ({"schedule": "not a cron"}, "schedule"),
    ({"schedule": "61 * * * *"}, "schedule"),
    ({"schedule": "* * * * * * * *"}, "schedule"),
    ({"lease_ms": 1_000, "heartbeat_ms": 500}, "heartbeat_ms"),
    ({"lease_ms": 1_000, "heartbeat_ms": 600}, "heartbeat_ms"),
    ({"lease_ms": 3_000}, None),  # valid: heartbeat derived to 500
    ({"lease_ms": -1}, "lease_ms"),
    ({"heartbeat_ms": -5}, "heartbeat_ms"),
    ({"catch_up_ms": -1}, "catch_up_ms"),
    ({"max_late_ms": -1}, "max_late_ms"),
    ({"jitter_ms": -1}, "jitter_ms"),
    ({"history_size": -1}, "history_size"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"lease_ms": 1.5}, "lease_ms"),
    ({"lease_ms": True}, "lease_ms"),
    ({"overlap": "queue"}, "overlap"),
    ({"tz": "Mars/Olympus"}, "tz"),
    ({"tz": ""}, "tz"),
    ({"schedule": 0}, "schedule"),
    ({"schedule": -1}, "schedule"),
    ({"schedule": timedelta(0)}, "schedule"),
    ({"schedule": 0.0001}, "schedule"),
    ({"schedule": ["* * * * *"]}, "schedule"),
    ({"schedule": None}, "schedule"),
    ({"schedule": True}, "schedule"),
    ({"lease": 5_000}, "lease"),
    ({"stop_timeout_ms": 5_000}, "stop_timeout_ms"),
]


@pytest.mark.parametrize("given, option", BAD_JOB_OPTIONS)
def test_bad_job_registration_raises_config_error_naming_job_and_option(
    cron: LeaseCron, given: Dict[str, Any], option: Any
) -> None:
    """Invalid input fails at registration with ConfigError (a ValueError) naming the job and the option."""
    given = dict(given)
    schedule = given.pop("schedule", 60)
    if option is None:
        cron.add_job(noop, schedule, name="the-job", **given)
        return
    with pytest.raises(ConfigError) as info:
        cron.add_job(noop, schedule, name="the-job", **given)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "the-job" in message, message
    assert option in message, message
    assert "the-job" not in cron.jobs


@pytest.mark.parametrize(
    "schedule, field, reason",
    [
        ("61 * * * *", "minute field '61'", "out of range"),
        ("* 24 * * *", "hour field '24'", "out of range"),
        ("*/0 * * * *", "minute field '*/0'", "step '0'"),
        ("* * * * 1#9", "day-of-week field '1#9'", "Invalid day_of_week value: '9'"),
        ("* * * * * 60", "second field '60'", "out of range"),
        ("* * * *", None, "Exactly 5, 6 or 7 columns"),
    ],
)
def test_bad_cron_string_error_keeps_the_reason(cron: LeaseCron, schedule: str, field: Any, reason: str) -> None:
    """A cron string croniter refuses fails with croniter's reason and the field at fault, naming the job."""
    with pytest.raises(ConfigError) as info:
        cron.add_job(noop, schedule, name="the-job")
    message = str(info.value)
    prefix = f"job 'the-job': schedule: not a valid cron expression {schedule!r}: "
    assert message.startswith(prefix + (f"bad {field}: " if field else "")), message
    assert reason in message, message


def test_decorator_validates_like_add_job(cron: LeaseCron) -> None:
    """@cron.job validates at registration too, and returns the function unchanged."""
    with pytest.raises(ConfigError, match="deco.*overlap"):

        @cron.job(60, name="deco", overlap="nope")
        def bad() -> None:
            pass

    @cron.job("*/5 * * * *", name="deco", lease_ms=4_000)
    def good() -> None:
        pass

    assert good.__name__ == "good" and callable(good)
    assert cron.jobs["deco"].options.lease_ms == 4_000


def test_duplicate_job_name_raises_config_error(cron: LeaseCron) -> None:
    """Registering a second job under a taken name fails, naming it; the first stays."""
    cron.add_job(noop, 60, name="twice")
    with pytest.raises(ConfigError, match="twice") as info:
        cron.add_job(noop_ctx, 30, name="twice")
    assert isinstance(info.value, ValueError)
    assert cron.jobs["twice"].func is noop


@pytest.mark.parametrize("name", ["", "   ", 5])
def test_empty_or_non_string_job_name_raises_config_error(cron: LeaseCron, name: Any) -> None:
    """A job name must be a non-empty string."""
    with pytest.raises(ConfigError, match="name"):
        cron.add_job(noop, 60, name=name)
    assert cron.jobs == {}


def test_non_callable_handler_raises_config_error(cron: LeaseCron) -> None:
    """The handler must be callable."""
    with pytest.raises(ConfigError, match="callable"):
        cron.add_job("not a function", 60, name="j")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options, option",
    [
        ({"lease_ms": -1}, "lease_ms"),
        ({"heartbeat_ms": 0}, "heartbeat_ms"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"catch_up_ms": -5}, "catch_up_ms"),
        ({"max_late_ms": -5}, "max_late_ms"),
        ({"jitter_ms": -5}, "jitter_ms"),
        ({"history_size": -5}, "history_size"),
        ({"tz": "Nowhere/Land"}, "tz"),
        ({"stop_timeout_ms": -1}, "stop_timeout_ms"),
        ({"lease_ms": "30s"}, "lease_ms"),
    ],
)
def test_bad_instance_defaults_raise_config_error(options: Dict[str, Any], option: str) -> None:
    """Bad LeaseCron-level defaults fail at construction, naming the option."""
    with pytest.raises(ConfigError, match=option) as info:
        LeaseCron(MemoryStore(), runner="r", **options)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"heartbeat_ms": 20_000}, "heartbeat_ms (20000) must be under half of lease_ms (30000, the default)"),
        ({"lease_ms": 10_000, "heartbeat_ms": 5_000}, "heartbeat_ms (5000) must be under half of lease_ms (10000)"),
        ({"lease_ms": 12_000, "heartbeat_ms": 9_000}, "heartbeat_ms (9000) must be under half of lease_ms (12000)"),
    ],
)
def test_instance_options_are_checked_together_at_construction(options: Dict[str, Any], message: str) -> None:
    """LeaseCron's own options must make sense together, as a job would use them: a heartbeat not
    under half the lease fails at construction, naming LeaseCron, not at the first job."""
    with pytest.raises(ConfigError) as info:
        LeaseCron(MemoryStore(), runner="r", **options)
    assert str(info.value) == f"LeaseCron: {message}"
    LeaseCron(MemoryStore(), runner="r", heartbeat_ms=20_000, lease_ms=60_000)  # fine together


@pytest.mark.parametrize("lease_ms", [0, 1, 2])
@pytest.mark.parametrize("heartbeat_ms", [None, 1])
def test_a_lease_too_short_for_any_heartbeat_blames_lease_ms(lease_ms: int, heartbeat_ms: Any) -> None:
    """A lease under 3 ms leaves no heartbeat under half of it (a heartbeat is at least 1 ms): the
    error names lease_ms, on a job and on LeaseCron, not a derived heartbeat_ms nobody set."""
    reason = (
        f"lease_ms must be >= 3, not {lease_ms}"
        " (too short for a heartbeat: heartbeat_ms, at least 1, must stay under half of it)"
    )
    cron = LeaseCron(MemoryStore(), runner="r")
    with pytest.raises(ConfigError) as info:
        cron.add_job(noop, 60, name="j", lease_ms=lease_ms, heartbeat_ms=heartbeat_ms)
    assert str(info.value) == f"job 'j': {reason}"
    with pytest.raises(ConfigError) as info:
        LeaseCron(MemoryStore(), runner="r", lease_ms=lease_ms, heartbeat_ms=heartbeat_ms)
    assert str(info.value) == f"LeaseCron: {reason}"


def test_unknown_instance_option_is_a_type_error() -> None:
    """An unknown keyword of LeaseCron() is refused (a plain TypeError of the call)."""
    with pytest.raises(TypeError):
        LeaseCron(MemoryStore(), runner="r", lease=5_000)  # type: ignore[call-arg]


def test_instance_default_bad_against_a_job_lease_fails_at_registration() -> None:
    """An instance heartbeat that is not under half of a job's lease fails when that job registers,
    saying where the heartbeat came from."""
    cron = LeaseCron(MemoryStore(), runner="r", heartbeat_ms=2_000)
    cron.add_job(noop, 60, name="long", lease_ms=10_000)
    with pytest.raises(ConfigError) as info:
        cron.add_job(noop, 60, name="short", lease_ms=3_000)
    assert str(info.value) == "job 'short': heartbeat_ms (2000, from LeaseCron) must be under half of lease_ms (3000)"


@pytest.mark.parametrize("runner", ["", 5])
def test_bad_runner_name_raises_config_error(runner: Any) -> None:
    """A runner name must be a non-empty string."""
    with pytest.raises(ConfigError, match="runner"):
        LeaseCron(MemoryStore(), runner=runner)


def test_store_must_be_a_store_or_url() -> None:
    """Anything but a Store or a URL string is refused."""
    with pytest.raises(ConfigError, match="store"):
        LeaseCron(object(), runner="r")  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["nope://x", "mysql://localhost/db", "leasecron.db"])
def test_open_store_with_unknown_scheme_names_the_known_ones(url: str) -> None:
    """open_store (and LeaseCron given a URL) refuses an unknown scheme and says which are known."""
    with pytest.raises(ConfigError) as info:
        leasecron.open_store(url)
    assert "sqlite://" in str(info.value) and "memory://" in str(info.value)
    with pytest.raises(ConfigError):
        LeaseCron(url, runner="r")


def test_store_url_string_is_accepted(backend: Backend) -> None:
    """LeaseCron(url) opens the store the URL names."""
    cron = LeaseCron(backend.url(), runner="r")
    try:
        assert isinstance(cron.store, leasecron.Store)
        assert cron.store.kind == backend.kind
        assert abs(cron.store.now_ms() - backend.open().now_ms()) < 1_000
    finally:
        cron.store.close()


def test_default_job_name_is_module_dot_qualname(cron: LeaseCron) -> None:
    """A job registered without a name is called "module.qualname" of its handler."""

    class Holder:
        @staticmethod
        def work() -> None:
            pass

    cron.add_job(noop, 60)
    cron.add_job(Holder.work, 60)
    assert f"{__name__}.noop" in cron.jobs
    assert f"{__name__}.test_default_job_name_is_module_dot_qualname.<locals>.Holder.work" in cron.jobs


def test_default_runner_is_hostname_dash_pid() -> None:
    """A LeaseCron given no runner is called "<hostname>-<pid>"."""
    cron = LeaseCron(MemoryStore())
    assert cron.runner == f"{socket.gethostname()}-{os.getpid()}"


def test_unknown_event_name_raises_config_error(cron: LeaseCron) -> None:
    """cron.on() accepts only the seven event types."""
    with pytest.raises(ConfigError, match="nope"):
        cron.on("nope", lambda event: None)
    for name in ("start", "success", "failed", "skip", "lost", "handover", "error"):
        cron.on(name, lambda event: None)


def test_non_callable_event_callback_raises_config_error(cron: LeaseCron) -> None:
    """cron.on() needs a callable."""
    with pytest.raises(ConfigError):
        cron.on("start", "print")  # type: ignore[arg-type]


def test_handler_taking_context_or_nothing_is_detected(cron: LeaseCron) -> None:
    """A handler with a positional parameter gets the Context; one with none is called bare."""

    def star(*args: Any) -> None:
        pass

    def kw_only(*, x: int = 1) -> None:
        pass

    for name, func, takes in [
        ("ctx", noop_ctx, True),
        ("none", noop, False),
        ("star", star, True),
        ("kw", kw_only, False),
        ("lambda", lambda: None, False),
        ("lambda-ctx", lambda ctx: None, True),
    ]:
        cron.add_job(func, 60, name=name)
        assert cron.jobs[name].takes_context is takes, name
