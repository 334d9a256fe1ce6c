"""Stored runs that were tampered with (issue 5, item 6: "Bad input").

Each case changes one run behind the store's back with the store's own raw client — SQLite
``UPDATE`` (its columns take any type), PostgreSQL ``UPDATE`` of what the schema allows (an
unknown status, attempt 0, negative hand-overs), Redis/Valkey ``HSET`` of the run's JSON (not
JSON, an array, a field missing, a field of the wrong type, an unknown status). The promises
(docs/design.rst):

* reading the tampered run (``get_run``, ``runs``, and ``unfinished`` when it lists it) and
  claiming its slot raise ``StoreError`` naming the job and the slot — never a ``KeyError``,
  ``TypeError`` or ``JSONDecodeError`` from inside the store;
* nothing else is lost or changed: the job's other runs read back as they were, another job's
  runs stay readable, renewable, finishable and claimable, and a claim that fails changed
  nothing (Redis: the Lua script checks every run it reads before it writes any);
* an instance whose job has a tampered run keeps running its other jobs; the start-up of the
  tampered job is reported and tried again.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from typing import Any, Callable, List

import pytest

from leasecron import ConfigError, LeaseCron, Run, Store, StoreError
from tests.bad_input.support import CASES, TAMPERABLE, tamper
from tests.conftest import BACKENDS, Backend
from tests.engine.support import CATCH_UP_HOUR, FAST, HOURLY, NEVER_LATE, Seen, latest_hourly_slot
from tests.helpers import wait_for

LONG = 60_000
VICTIM = "victim"
NEIGHBOUR = "neighbour"

ALL_CASES = [(kind, case) for kind in TAMPERABLE for case in CASES[kind]]


@pytest.fixture
def case_backend(request: pytest.FixtureRequest, tmp_path: Any) -> Backend:
    kind = request.param
    b = BACKENDS[kind](tmp_path)
    yield b
    b.close()


def _names_job_and_slot(exc: BaseException, job: str, slot_ms: int) -> None:
    message = str(exc)
    assert isinstance(exc, StoreError) and not isinstance(exc, ConfigError), repr(exc)
    assert repr(job) in message and str(slot_ms) in message, message
    assert "unreadable" in message, message


def _either(call: Callable[[], Any], job: str, slot_ms: int) -> Any:
    """``call()``'s answer, or None if it raised StoreError naming the job and slot; any other
    exception fails the test."""
    try:
        return call()
    except StoreError as exc:
        _names_job_and_slot(exc, job, slot_ms)
        return None


def _setup(store: Store) -> "tuple[int, Run, Run, List[Run]]":
    """A victim job with a finished run and a running one (the one to tamper with), and a
    neighbour with a finished and a running run. Returns (slot, finished victim run, running
    victim run, the neighbour's runs)."""
    slot = store.now_ms() - 5_000
    old = store.claim(VICTIM, slot - 1_000, runner="r", lease_ms=LONG, overlap="allow").run
    assert old is not None and store.finish(VICTIM, old.slot_ms, old.token, "success")
    target = store.claim(VICTIM, slot, runner="r", lease_ms=LONG, overlap="allow").run
    assert target is not None
    done = store.claim(NEIGHBOUR, slot - 1_000, runner="n", lease_ms=LONG).run
    assert done is not None and store.finish(NEIGHBOUR, done.slot_ms, done.token, "failed", "kept")
    assert store.claim(NEIGHBOUR, slot, runner="n", lease_ms=LONG).won
    return slot, store.get_run(VICTIM, old.slot_ms), target, store.runs(NEIGHBOUR)  # type: ignore[return-value]


@pytest.mark.parametrize(
    "case_backend, case", ALL_CASES, indirect=["case_backend"], ids=[f"{k}-{c}" for k, c in ALL_CASES]
)
def test_a_tampered_run_gives_a_clear_store_error_and_nothing_else_is_lost(case_backend: Backend, case: str) -> None:
    """Reads and claims of the tampered run raise StoreError naming the job and slot; the job's
    other run and the neighbour job are untouched and keep working."""
    store = case_backend.open()
    slot, old, target, neighbour = _setup(store)
    tamper(case_backend, store, VICTIM, slot, case)

    for call in (lambda: store.get_run(VICTIM, slot), lambda: store.runs(VICTIM)):
        with pytest.raises(StoreError) as info:
            call()
        _names_job_and_slot(info.value, VICTIM, slot)
    unfinished = _either(lambda: store.unfinished(VICTIM), VICTIM, slot)
    assert unfinished in (None, [])  # listed: unreadable; or left out as not running
    for reason in ("takeover", "schedule"):
        with pytest.raises(StoreError) as info:
            store.claim(VICTIM, slot, runner="x", reason=reason, lease_ms=LONG, max_late_ms=NEVER_LATE)
        assert repr(VICTIM) in str(info.value) and str(slot) in str(info.value), str(info.value)
    # operations with the run's token: refused, or a clear StoreError; never another exception
    for call in (
        lambda: store.heartbeat(VICTIM, slot, target.token, LONG),
        lambda: store.finish(VICTIM, slot, target.token, "success"),
        lambda: store.release(VICTIM, slot, target.token),
    ):
        try:
            call()
        except StoreError as exc:
            assert repr(VICTIM) in str(exc) and str(slot) in str(exc), str(exc)

    # the job's other run, and the neighbour job, are exactly as they were, and keep working
    assert store.get_run(VICTIM, old.slot_ms) == old
    assert store.runs(NEIGHBOUR) == neighbour
    assert store.jobs() == [NEIGHBOUR, VICTIM]
    running = neighbour[0]
    assert store.heartbeat(NEIGHBOUR, running.slot_ms, running.token, LONG)
    assert store.finish(NEIGHBOUR, running.slot_ms, running.token, "success")
    later = store.claim(NEIGHBOUR, slot + 1_000, runner="n", lease_ms=LONG)
    assert later.won and later.run is not None
    assert [r.status for r in store.runs(NEIGHBOUR)] == ["running", "success", "failed"]
    # a new slot of the tampered job: the store either refuses it clearly or runs it by the rules
    newer = _either(lambda: store.claim(VICTIM, slot + 1_000, runner="x", lease_ms=LONG, overlap="allow"), VICTIM, slot)
    assert newer is None or newer.outcome == "won"
    assert store.get_run(VICTIM, old.slot_ms) == old


@pytest.mark.parametrize("case_backend", TAMPERABLE, indirect=True)
def test_a_claim_that_meets_a_tampered_run_writes_nothing(case_backend: Backend) -> None:
    """A new claim of a job with two earlier running runs whose leases ran out — the newer one
    intact, the older one tampered with — either fails with StoreError and writes nothing (the
    intact run is not marked interrupted, the new slot gets no run), or wins by the rules."""
    store = case_backend.open()
    now = store.now_ms()
    older = store.claim(VICTIM, now - 3_000, runner="r", lease_ms=LONG, overlap="allow").run
    newer = store.claim(VICTIM, now - 2_000, runner="r", lease_ms=LONG, overlap="allow").run
    assert older is not None and newer is not None
    for run in (older, newer):  # both runners die: their leases end in 1 ms
        assert store.heartbeat(VICTIM, run.slot_ms, run.token, 1)
    newer = store.get_run(VICTIM, newer.slot_ms)
    assert newer is not None
    wait_for(lambda: store.now_ms() > newer.lease_end_ms + 1, timeout=5)
    tamper(case_backend, store, VICTIM, older.slot_ms, next(iter(CASES[case_backend.name])))
    redis_like = case_backend.kind == "redis"
    try:
        claim = store.claim(VICTIM, now - 1_000, runner="x", lease_ms=LONG, overlap="allow")
    except StoreError as exc:
        assert repr(VICTIM) in str(exc) and str(older.slot_ms) in str(exc), str(exc)
        assert store.get_run(VICTIM, newer.slot_ms) == newer, "the failed claim changed another run"
        assert store.get_run(VICTIM, now - 1_000) is None, "the failed claim stored a run"
    else:
        # SQLite and PostgreSQL mark the expired runs interrupted in SQL without reading them
        assert not redis_like, f"a claim over a corrupt run's JSON won: {claim}"
        assert claim.won
        after = store.get_run(VICTIM, newer.slot_ms)
        assert after is not None and after.status == "interrupted"


@pytest.mark.parametrize("case_backend", TAMPERABLE, indirect=True)
def test_an_instance_with_a_tampered_job_runs_its_other_jobs(
    case_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """On start, the job whose latest run was tampered with cannot be recovered: a warning and
    an error event name it, and its recovery is tried again; the instance runs the neighbour's
    missed slot (catch-up) as usual and keeps running."""
    caplog.set_level(logging.WARNING, logger="leasecron")
    observer = case_backend.open()
    slot = latest_hourly_slot(observer)
    assert observer.claim(VICTIM, slot, runner="dead", lease_ms=LONG, max_late_ms=NEVER_LATE).won
    tamper(case_backend, observer, VICTIM, slot, next(iter(CASES[case_backend.name])))
    cron = LeaseCron(case_backend.open(), runner="a", catch_up_ms=CATCH_UP_HOUR, **FAST)
    seen = Seen(cron)
    cron.add_job(lambda: None, HOURLY, name=VICTIM)
    cron.add_job(lambda: None, HOURLY, name=NEIGHBOUR)
    try:
        cron.start()
        _, success = seen.wait("success", timeout=5, job=NEIGHBOUR)
        assert success.slot_ms == slot
        error = seen.wait("error", timeout=5, job=VICTIM)[1]
        assert error.error is not None and "unreadable" in error.error and str(slot) in error.error

        def warnings() -> List[str]:
            return [r.getMessage() for r in caplog.records if "cannot recover job 'victim'" in r.getMessage()]

        wait_for(lambda: len(warnings()) >= 2, timeout=5)
        assert all("unreadable" in w for w in warnings())
        assert cron.running and seen.of("start", job=VICTIM) == []
    finally:
        cron.stop(timeout=2)
    assert observer.get_run(NEIGHBOUR, slot).status == "success"  # type: ignore[union-attr]


@pytest.mark.processes
def test_runs_command_on_a_tampered_store_exits_1_naming_the_run(tmp_path: Any) -> None:
    """`leasecron runs` on a SQLite file with a tampered run exits 1 with one line naming the job
    and slot, without a traceback."""
    backend = BACKENDS["sqlite"](tmp_path)
    store = backend.open()
    slot, _, _, _ = _setup(store)
    tamper(backend, store, VICTIM, slot, "text in an integer column")
    result = subprocess.run(
        [sys.executable, "-m", "leasecron", "runs", backend.url(), "--job", VICTIM],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    backend.close()
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert re.search(rf"'victim' at slot {slot} is unreadable: attempt is 'many'", result.stderr), result.stderr
    assert "Traceback" not in result.stderr
