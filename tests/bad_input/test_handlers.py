"""Handlers and callbacks that misbehave (issue 5, item 6: "Bad input").

The promises (docs/usage.rst, "Handlers" and "Events"; docs/design.rst):

* a handler that never returns, and ignores its signal, cannot hold ``stop(timeout)`` past its
  timeout: the run is *abandoned* (no more heartbeats; the store keeps it ``running`` with its
  lease until a backup takes it over), its thread is a daemon, and the process can exit —
  from ``stop()`` or from the exit hook;
* a handler that raises ``SystemExit``, ``KeyboardInterrupt`` or any other ``BaseException``
  is recorded ``failed`` with ``"Type: message"``, exactly like an ``Exception``; the instance
  keeps running and later slots run;
* a handler whose exception cannot be shown (``__str__`` raises) or whose message holds what
  no store can keep (a lone surrogate) is still recorded ``failed`` (``<unprintable>``, the
  surrogate escaped) and never run again;
* an event callback that raises anything, ``SystemExit`` included, on ``start``, ``success``,
  ``failed``, ``lost`` or any other event, is logged and ignored: the run and the instance go
  on as if it had returned.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, List

import pytest

from leasecron import Context, Event
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import (
    CATCH_UP_HOUR,
    EVENT_TYPES,
    HEARTBEAT,
    HOURLY,
    Calls,
    Recorder,
    handler,
    stored,
)


class Fatal(BaseException):
    """A BaseException that is neither an Exception, SystemExit nor KeyboardInterrupt."""


# -- a handler that never returns ----------------------------------------------------------------


def test_stop_abandons_a_handler_that_ignores_its_signal_within_the_timeout(make_cron: MakeCron, gates: Gates) -> None:
    """stop(0.3) returns within the timeout and a margin although the handler never looks at its
    signal; the run thread is a daemon; the run is abandoned: still running in the store with
    its token, its lease no longer renewed."""
    never = gates()  # opened only at teardown
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    calls = Calls()

    def body(ctx: Context) -> None:
        while not never.is_set():  # busy, deaf to ctx.signal
            time.sleep(0.01)

    cron.add_job(handler(cron.store, calls, body), HOURLY, name="stuck")
    cron.start()
    ctx = calls.wait(1, timeout=5)[0]
    run_threads = [t for t in threading.enumerate() if t.name.startswith("leasecron-run-stuck@")]
    assert len(run_threads) == 1 and run_threads[0].daemon
    began = time.monotonic()
    cron.stop(timeout=0.3)
    assert 0.25 <= time.monotonic() - began < 1.0
    assert not cron.running and cron.live_runs() == []
    assert ctx.signal.aborted and ctx.signal.reason == "stop"
    assert run_threads[0].is_alive(), "the handler should still be running (abandoned, not killed)"
    threading.Event().wait(HEARTBEAT / 1000)  # a heartbeat that was in flight at stop() has landed
    lease_end = stored(cron.store, "stuck", ctx.slot_ms).lease_end_ms
    threading.Event().wait(3 * HEARTBEAT / 1000)
    run = stored(cron.store, "stuck", ctx.slot_ms)
    assert (run.status, run.token, run.attempt, run.lease_end_ms) == ("running", ctx.token, 1, lease_end)
    assert [e.type for e in rec.of()] == ["start"]


SCRIPT = """
import pathlib, sys, time
import leasecron

here = pathlib.Path(sys.argv[1])
cron = leasecron.LeaseCron("sqlite:///" + str(here / "cron.db"), runner="deaf", lease_ms=2_000,
                           heartbeat_ms=100, jitter_ms=0, catch_up_ms=3_660_000, stop_timeout_ms=300)

@cron.job(3600, name="forever")
def forever(ctx):
    (here / "started").write_text(str(ctx.slot_ms))
    while True:  # never returns, never looks at ctx.signal
        time.sleep(0.05)

cron.start()
while not (here / "started").exists():
    time.sleep(0.01)
if sys.argv[2] == "stop":
    cron.stop(timeout=0.3)
print("main returns", flush=True)
"""


@pytest.mark.processes
@pytest.mark.parametrize("how", ["stop", "exit hook"])
def test_a_process_whose_handler_never_returns_can_exit(tmp_path: Path, how: str) -> None:
    """A script whose handler loops forever exits (code 0) once main returns, after stop(0.3) or
    through the exit hook (stop_timeout_ms 300): the handler's thread does not keep it alive."""
    (tmp_path / "deaf.py").write_text(textwrap.dedent(SCRIPT))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(tmp_path / "deaf.py"), str(tmp_path), "stop" if how == "stop" else "hook"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "main returns" in done.stdout
    assert time.monotonic() - began < 15
    import leasecron

    with leasecron.open_store(f"sqlite:///{tmp_path / 'cron.db'}") as store:
        run = store.get_run("forever", int((tmp_path / "started").read_text()))
    assert run is not None and (run.status, run.runner, run.attempt) == ("running", "deaf", 1)


# -- handlers that raise BaseException -------------------------------------------------------------

RAISED: List[Callable[[], BaseException]] = [
    lambda: SystemExit(3),
    lambda: KeyboardInterrupt(),
    lambda: Fatal("beyond Exception"),
    lambda: SystemExit(),
]
EXPECTED = ["SystemExit: 3", "KeyboardInterrupt", "Fatal: beyond Exception", "SystemExit"]


def test_handlers_raising_base_exceptions_are_recorded_failed_and_the_instance_runs_on(make_cron: MakeCron) -> None:
    """SystemExit(3), KeyboardInterrupt, a BaseException subclass and a bare SystemExit raised by
    a handler at four slots in a row: each slot is recorded failed with "Type: message" and a
    failed event; the instance keeps running and the next slot succeeds."""
    cron = make_cron("a", catch_up_ms=0)
    rec = Recorder(cron)
    order: List[int] = []
    lock = threading.Lock()

    def body(ctx: Context) -> None:
        with lock:
            order.append(ctx.slot_ms)
            index = len(order) - 1
        if index < len(RAISED):
            raise RAISED[index]()

    cron.add_job(body, 0.2, name="raiser")  # a slot every 200 ms
    cron.start()
    success = rec.wait("success", timeout=10)
    failed = rec.of("failed")
    assert [e.error for e in failed] == EXPECTED
    assert [e.slot_ms for e in failed] == order[: len(RAISED)]
    assert success.slot_ms == order[len(RAISED)]
    for event in failed:
        run = stored(cron.store, "raiser", event.slot_ms or 0)
        assert (run.status, run.error, run.attempt) == ("failed", event.error, 1)
    assert cron.running and rec.of("lost") == [] and rec.of("error") == []


def test_unprintable_and_unencodable_errors_are_still_recorded_failed(make_cron: MakeCron) -> None:
    """An exception whose __str__ raises is recorded "Type: <unprintable>"; a message with a lone
    surrogate (a file name decoded with surrogateescape) is recorded with it escaped. Neither is
    lost nor run again."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("cannot show myself")

    def unprintable() -> None:
        raise Unprintable()

    def unencodable() -> None:
        raise FileNotFoundError(b"/data/caf\xe9.csv".decode("utf-8", "surrogateescape"))

    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    cron.add_job(unprintable, HOURLY, name="unprintable")
    cron.add_job(unencodable, HOURLY, name="unencodable")
    cron.start()
    expected = {"unprintable": "Unprintable: <unprintable>", "unencodable": "FileNotFoundError: /data/caf\\udce9.csv"}
    for job, error in expected.items():
        event = rec.wait("failed", timeout=5, job=job)
        assert event.error == error
        run = stored(cron.store, job, event.slot_ms or 0)
        assert (run.status, run.error, run.attempt) == ("failed", error, 1)
    threading.Event().wait((500 + 3 * HEARTBEAT) / 1000)  # a lease and backup checks later
    for job in expected:
        assert len(rec.of("start", job=job)) == 1
    assert rec.of("lost") == [] and rec.of("error") == []


# -- callbacks that raise -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raised",
    [
        lambda e: RuntimeError(f"callback broke on {e.type}"),
        lambda e: SystemExit(f"exit on {e.type}"),
        lambda e: Fatal(e.type),
    ],
    ids=["RuntimeError", "SystemExit", "BaseException"],
)
def test_callbacks_that_raise_on_every_event_change_nothing(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture, raised: Callable[[Event], BaseException]
) -> None:
    """Callbacks raising on every event type (start, success, failed, lost, …) are logged and
    ignored: a run fenced by a refused heartbeat is still lost (handler aborted, store not
    touched again), a failing run is recorded failed, a good one success, and later slots run."""
    caplog.set_level(logging.ERROR, logger="leasecron")
    cron = make_cron("a", catch_up_ms=0)

    def explode(event: Event) -> None:
        raise raised(event)

    for name in EVENT_TYPES:
        cron.on(name, explode)
    rec = Recorder(cron)  # registered after the raising callbacks: still called
    seen_lost: List[Any] = []
    calls: List[int] = []

    def body(ctx: Context) -> None:
        calls.append(ctx.slot_ms)
        if len(calls) == 1:  # the first run is fenced: the test releases its lease behind its back
            assert cron.store.release(ctx.job, ctx.slot_ms, ctx.token)
            ctx.signal.wait(5)
            seen_lost.append(ctx.signal.reason)
        elif len(calls) == 2:
            raise ValueError("second slot fails")

    cron.add_job(body, 0.2, name="job")  # a slot every 200 ms
    cron.start()
    lost = rec.wait("lost", timeout=5)
    failed = rec.wait("failed", timeout=5)
    success = rec.wait("success", timeout=5)
    assert seen_lost == ["lost"]
    assert (lost.slot_ms, failed.slot_ms, success.slot_ms) == tuple(calls[:3])
    first = stored(cron.store, "job", lost.slot_ms or 0)
    assert (first.status, first.attempt, first.handed_over) in {("running", 1, True), ("interrupted", 1, True)}
    assert stored(cron.store, "job", failed.slot_ms or 0).status == "failed"
    assert stored(cron.store, "job", success.slot_ms or 0).status == "success"
    assert cron.running
    # "leasecron: <event> callback <callback> failed (ignored)", with the traceback of what it raised
    pattern = re.compile(r"leasecron: (\w+) callback .* failed")
    broke = {m.group(1) for r in caplog.records if (m := pattern.match(r.getMessage()))}
    assert {"start", "lost", "failed", "success"} <= broke, broke
