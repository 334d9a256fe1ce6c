"""The ``leasecron`` log (issue 7, "Logging and hooks"): one line per event, at its level, in one shape:
``leasecron: <what> job 'x' slot 2026-11-30T05:00:00Z [attempt n] runner 'r' [(reason)][: detail]``.

Each test starts real instances on a real store (memory and SQLite), makes one kind of event happen
and reads what the ``leasecron`` logger said, with ``caplog``: the exact text (the slot computed
here independently) and the level. Every record must have been formatted lazily (``%`` arguments).
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from typing import List

import pytest

from leasecron import Context
from tests.conftest import Backend
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import CATCH_UP_HOUR, HOURLY, Calls, Recorder, dead_claim, fence, handler, latest_hourly_slot
from tests.engine.support import waiting_on_its_signal
from tests.helpers import wait_for

pytestmark = pytest.mark.parametrize("backend", ["memory", "sqlite"], indirect=True)

#: A run line's template: what happened, then the run (job, slot, attempt) and this instance's runner.
RUN_LINE = re.compile(r"^leasecron: [a-z ]+ job %r slot %s (attempt %d )?runner %r")


def iso(slot_ms: int) -> str:
    """A slot as the log must show it: UTC, ``Z``, milliseconds only when there are some."""
    text = datetime.fromtimestamp(slot_ms // 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{slot_ms % 1000:03d}Z" if slot_ms % 1000 else f"{text}Z"


def records(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    """The records of the ``leasecron`` logger so far."""
    return [r for r in caplog.records if r.name == "leasecron"]


def wait_record(caplog: pytest.LogCaptureFixture, pattern: str, timeout: float = 3.0) -> logging.LogRecord:
    """The first ``leasecron`` record whose whole message matches the regular expression ``pattern``."""

    def found() -> "logging.LogRecord | None":
        return next((r for r in records(caplog) if re.fullmatch(pattern, r.getMessage())), None)

    return wait_for(
        found, timeout, message=f"no log line {pattern!r}; lines: {[r.getMessage() for r in records(caplog)]}"
    )


def assert_lazy(caplog: pytest.LogCaptureFixture) -> None:
    """Every ``leasecron`` record was a ``%`` template with arguments, never text formatted beforehand."""
    for record in records(caplog):
        assert record.msg.startswith("leasecron: ") and record.args, (record.msg, record.args)
        if " job " in record.msg:
            assert RUN_LINE.match(record.msg) or "on start, runner %r" in record.msg, record.msg


@pytest.fixture(autouse=True)
def debug_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture the ``leasecron`` logger from DEBUG up; check every line's template at the end."""
    caplog.set_level(logging.DEBUG, logger="leasecron")
    yield caplog
    assert_lazy(caplog)


def test_won_and_succeeded_are_info_lines_naming_the_run_and_the_runner(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture
) -> None:
    """A won claim logs INFO ``won ... (catch-up)`` or ``(schedule)``; a returned handler ``succeeded ... in s``."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    a.add_job(lambda: None, HOURLY, name="caught")
    a.add_job(lambda: None, 1, name="tick")
    hour = latest_hourly_slot(a.store)
    a.start()
    line = f"leasecron: won job 'caught' slot {iso(hour)} attempt 1 runner 'a' (catch-up)"
    assert wait_record(caplog, re.escape(line)).levelno == logging.INFO
    start = rec.wait("start", job="tick", reason="schedule")
    assert start.slot_ms is not None
    line = f"leasecron: won job 'tick' slot {iso(start.slot_ms)} attempt 1 runner 'a' (schedule)"
    assert wait_record(caplog, re.escape(line)).levelno == logging.INFO
    rec.wait("success", job="tick", slot_ms=start.slot_ms)
    line = f"leasecron: succeeded job 'tick' slot {iso(start.slot_ms)} attempt 1 runner 'a' in "
    line = re.escape(line) + r"\d+\.\d{3} s"
    assert wait_record(caplog, line).levelno == logging.INFO


def test_heartbeats_are_debug_lines(make_cron: MakeCron, gates: Gates, caplog: pytest.LogCaptureFixture) -> None:
    """Each renewed lease logs DEBUG ``heartbeat renewed ... : lease <lease_ms> ms``, and only at DEBUG."""
    go = gates()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    calls = Calls()
    a.add_job(handler(a.store, calls, lambda ctx: go.wait(5)), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    line = f"leasecron: heartbeat renewed job 'job' slot {iso(ctx.slot_ms)} attempt 1 runner 'a': lease 500 ms"

    def renewals() -> List[logging.LogRecord]:
        return [r for r in records(caplog) if r.getMessage() == line]

    beats = wait_for(lambda: len(renewals()) >= 3 and renewals(), 3)
    assert {r.levelno for r in beats} == {logging.DEBUG}
    assert all(r.levelno == logging.DEBUG for r in records(caplog) if r.msg.startswith("leasecron: heartbeat"))


def test_backup_checks_are_debug_lines_and_the_takeover_an_info_line(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup logs each check and its answer at DEBUG (``running elsewhere``, then ``won``);
    winning the takeover logs INFO ``took over ... (takeover)``."""
    b = make_cron("b")
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    dead = dead_claim(b.store, "job", latest_hourly_slot(b.store), 1_000)
    b.start()
    head = re.escape(f"leasecron: backup check job 'job' slot {iso(dead.slot_ms)} runner 'b': ")
    running = wait_record(caplog, head + r"running elsewhere: backup of attempt 1 by 'dead', lease ends in \d+ ms")
    assert running.levelno == logging.DEBUG
    won = wait_record(caplog, head + "won: attempt 2")
    assert won.levelno == logging.DEBUG
    line = f"leasecron: took over job 'job' slot {iso(dead.slot_ms)} attempt 2 runner 'b' (takeover)"
    took = wait_record(caplog, re.escape(line))
    assert took.levelno == logging.INFO
    assert running.created <= won.created <= took.created
    rec.wait("success")


def test_skip_for_overlap_is_an_info_line_naming_the_run_still_alive(
    make_cron: MakeCron, gates: Gates, caplog: pytest.LogCaptureFixture
) -> None:
    """A slot refused while the earlier run holds its lease logs INFO ``skipped ... (overlap): <that run>``."""
    keep_running = gates()
    a = make_cron("a", catch_up_ms=0, stop_timeout_ms=0)
    rec = Recorder(a)
    calls = Calls()
    a.add_job(handler(a.store, calls, lambda ctx: keep_running.wait(10)), 1, name="job")
    a.start()
    first = calls.wait(1, timeout=3)[0]
    skip = rec.wait("skip", timeout=3, reason="overlap")
    assert skip.slot_ms == first.slot_ms + 1_000
    line = (
        f"leasecron: skipped job 'job' slot {iso(first.slot_ms + 1_000)} runner 'a' (overlap):"
        f" slot {iso(first.slot_ms)} attempt 1 by 'a' still holds its lease"
    )
    assert wait_record(caplog, re.escape(line)).levelno == logging.INFO


def test_skip_for_late_is_an_info_line_saying_why(make_cron: MakeCron, caplog: pytest.LogCaptureFixture) -> None:
    """A slot refused because a newer slot has a run logs INFO ``skipped ... (late): a newer slot ... has a run``."""
    a = make_cron("a", catch_up_ms=0)
    rec = Recorder(a)
    a.add_job(lambda: None, 1, name="job")
    store = a.store
    now = store.now_ms()
    newer = now - now % 1_000 + 5_000  # another instance (whose clock runs ahead) already ran a later slot
    run = dead_claim(store, "job", newer, 30_000, runner="ahead")
    assert store.finish("job", newer, run.token, "success")
    a.start()
    skip = rec.wait("skip", timeout=3, reason="late")
    assert skip.slot_ms is not None and skip.slot_ms < newer
    line = (
        f"leasecron: skipped job 'job' slot {iso(skip.slot_ms)} runner 'a' (late):"
        f" a newer slot, {iso(newer)}, already has a run"
    )
    assert wait_record(caplog, re.escape(line)).levelno == logging.INFO


def test_hand_over_on_stop_is_an_info_line(make_cron: MakeCron, caplog: pytest.LogCaptureFixture) -> None:
    """A run released on stop() logs INFO ``handed over ... : released on stop() for a backup``."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    calls = Calls()

    def throw_on_abort(ctx: Context) -> None:
        ctx.signal.wait(5)
        ctx.signal.raise_if_aborted()

    a.add_job(handler(a.store, calls, throw_on_abort), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    a.stop(timeout=2)
    rec.wait("handover", timeout=1)
    line = re.escape(f"leasecron: handed over job 'job' slot {iso(ctx.slot_ms)} attempt 1 runner 'a' after ") + (
        r"\d+\.\d{3} s: released on stop\(\) for a backup"
    )
    assert wait_record(caplog, line).levelno == logging.INFO


def test_lost_lease_is_a_warning_line_saying_why(
    make_cron: MakeCron, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A heartbeat refused after a takeover logs WARNING ``lost ... : heartbeat refused: ...``."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec, calls = waiting_on_its_signal(a)
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    fence(backend.open(), ctx)
    rec.wait("lost", timeout=2)
    line = (
        f"leasecron: lost job 'job' slot {iso(ctx.slot_ms)} attempt 1 runner 'a' (fenced):"
        " heartbeat refused: the run has another token now"
    )
    assert wait_record(caplog, re.escape(line)).levelno == logging.WARNING


def test_failed_run_is_an_error_line_with_the_traceback(make_cron: MakeCron, caplog: pytest.LogCaptureFixture) -> None:
    """A handler that raises logs ERROR ``failed ... after s: Type: message`` with the exception's traceback."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    raised: List[BaseException] = []

    def bad() -> None:
        error = ValueError("boom at the slot")
        raised.append(error)
        raise error

    a.add_job(bad, HOURLY, name="bad")
    a.start()
    failed = rec.wait("failed", timeout=3)
    assert failed.slot_ms is not None
    line = re.escape(f"leasecron: failed job 'bad' slot {iso(failed.slot_ms)} attempt 1 runner 'a' after ") + (
        r"\d+\.\d{3} s: ValueError: boom at the slot"
    )
    record = wait_record(caplog, line)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[1] is raised[0]
    assert "in bad" in caplog.text and "raise error" in caplog.text  # the traceback reaches the handlers
