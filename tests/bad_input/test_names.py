"""Hostile and huge job names (issue 5, item 6: "Bad input"), on every store.

The promises (docs/design.rst):

* any name every store can keep works alike everywhere: newlines, braces, ``%``, ``:``,
  quotes, SQL and Lua that try to break out, JSON, globs, emoji, right-to-left and zero-width
  marks, and names up to ``MAX_NAME_BYTES`` (1 024) bytes of UTF-8; acting on one job never
  touches another job's run;
* a name no store can keep is refused with ``ConfigError`` (a ``ValueError``) naming the job
  name, by every store operation and at registration, and the message stays short: a NUL
  character, a lone surrogate (not encodable as UTF-8), more than 1 024 bytes of UTF-8;
* the same for a runner name, a token and a failed run's error text (no driver error such as
  ``UnicodeEncodeError`` ever escapes a store).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest

from leasecron import ConfigError, LeaseCron, MemoryStore, Run, Store
from leasecron.limits import MAX_NAME_BYTES
from tests.conftest import Backend
from tests.engine.conftest import MakeCron
from tests.engine.support import CATCH_UP_HOUR, HOURLY, NEVER_LATE, Recorder, latest_hourly_slot, stored

LONG = 60_000  # a lease that stays alive for the whole test
NEIGHBOUR = "neighbour"

HOSTILE: Dict[str, str] = {
    "newline": "report\nnightly",
    "carriage return": "a\r\nb",
    "tab and spaces": " \ta b\t ",
    "braces": "{job}",
    "lone braces": "}{",
    "percent": "%s %d %% %00",
    "colons": "leasecron:{x}:runs",
    "quotes": "'\"`",
    "sql": "'; DROP TABLE x; --",
    "sql in the runs table": "x'); DELETE FROM leasecron_runs; --",
    "lua": "]]..redis.call('FLUSHALL')..[[",
    "lua string end": "\\\"}); redis.call('FLUSHDB') --",
    "json": '{"attempt": 99, "status": "success"}',
    "glob": "*?[a-z]",
    "emoji": "🕐🔥👩‍👩‍👧",
    "right-to-left override": "\u202etxt.exe\u202c",
    "hebrew": "שלום עולם",
    "zero-width space": "a\u200bb",
    "combining accent": "e\u0301",
    "byte order mark": "\ufeffjob",
    "backslashes": "a\\b\\",
    "non-character": "\uffff\U0010ffff",
    f"{MAX_NAME_BYTES} ascii bytes": "x" * MAX_NAME_BYTES,
    f"{MAX_NAME_BYTES} bytes of two-byte letters": "é" * (MAX_NAME_BYTES // 2),
    f"{MAX_NAME_BYTES} bytes of emoji": "🕐" * (MAX_NAME_BYTES // 4),
}

REFUSED: Dict[str, str] = {
    "NUL": "a\x00b",
    "NUL only": "\x00",
    "lone high surrogate": "a\ud800b",
    "lone low surrogate (surrogateescape)": "file-\udcff.txt",
    "100 KB": "x" * 100_000,
    "one byte too many": "x" * (MAX_NAME_BYTES + 1),
    "emoji over the limit": "🕐" * (MAX_NAME_BYTES // 4 + 1),
}


def _ops(store: Store, job: Any, slot: int) -> Dict[str, Callable[[], Any]]:
    """Every store operation that takes a job name, called with ``job``."""
    return {
        "claim": lambda: store.claim(job, slot, runner="r", lease_ms=LONG),
        "heartbeat": lambda: store.heartbeat(job, slot, "token", LONG),
        "finish": lambda: store.finish(job, slot, "token", "success"),
        "release": lambda: store.release(job, slot, "token"),
        "get_run": lambda: store.get_run(job, slot),
        "runs": lambda: store.runs(job),
        "unfinished": lambda: store.unfinished(job),
    }


def _neighbour(store: Store, slot: int) -> List[Run]:
    """A neighbour job with a finished run and a running one; returns both as stored."""
    finished = store.claim(NEIGHBOUR, slot - 1_000, runner="n", lease_ms=LONG, overlap="allow").run
    assert finished is not None and store.finish(NEIGHBOUR, finished.slot_ms, finished.token, "failed", "kept")
    running = store.claim(NEIGHBOUR, slot, runner="n", lease_ms=LONG, overlap="allow").run
    assert running is not None
    return store.runs(NEIGHBOUR)


def test_hostile_names_work_alike_and_never_touch_another_jobs_run(store: Store) -> None:
    """Every hostile name a store can keep wins, renews, finishes and releases its own run only:
    the neighbour job's runs stay exactly as they were, and each name reads back unchanged."""
    slot = store.now_ms() - 1_000
    neighbour = _neighbour(store, slot)
    for label, name in HOSTILE.items():
        won = store.claim(name, slot, runner="r", lease_ms=LONG)
        assert won.outcome == "won", label
        assert won.run is not None and won.run.job == name, label
        token = won.run.token
        # a token of the neighbour never acts on this job's run, nor this token on the neighbour's
        assert not store.heartbeat(name, slot, neighbour[0].token, LONG), label
        assert not store.heartbeat(NEIGHBOUR, slot, token, LONG), label
        assert store.heartbeat(name, slot, token, LONG), label
        assert store.release(name, slot, token), label
        again = store.claim(name, slot, runner="r2", reason="takeover", lease_ms=LONG)
        assert again.outcome == "won" and again.run is not None and again.run.attempt == 2, label
        assert store.finish(name, slot, again.run.token, "failed", error=f"boom in {name}"), label
        run = store.get_run(name, slot)
        assert run is not None, label
        assert (run.job, run.status, run.error, run.handed_over) == (name, "failed", f"boom in {name}", True), label
        assert store.runs(name) == [run] and store.unfinished(name) == [], label
        assert store.runs(NEIGHBOUR) == neighbour, f"{label}: the neighbour's runs changed"
    assert store.jobs() == sorted([NEIGHBOUR, *HOSTILE.values()])


@pytest.mark.parametrize("label", list(REFUSED))
def test_names_no_store_can_keep_are_refused_by_every_operation(store: Store, label: str) -> None:
    """A NUL, a lone surrogate or more than 1 024 bytes: every store operation raises ConfigError
    (a ValueError) that names the job name in a short message, and the store is unchanged."""
    slot = store.now_ms() - 1_000
    neighbour = _neighbour(store, slot)
    for operation, call in _ops(store, REFUSED[label], slot).items():
        with pytest.raises(ConfigError) as info:
            call()
        message = str(info.value)
        assert isinstance(info.value, ValueError)
        assert "job name" in message and len(message) < 300, (operation, message)
    assert store.jobs() == [NEIGHBOUR]
    assert store.runs(NEIGHBOUR) == neighbour


@pytest.mark.parametrize("label", list(REFUSED))
def test_names_no_store_can_keep_are_refused_at_registration(label: str) -> None:
    """LeaseCron refuses the same names when the job registers, with the same short ConfigError."""
    cron = LeaseCron(MemoryStore(), runner="r")
    with pytest.raises(ConfigError) as info:
        cron.add_job(lambda: None, 60, name=REFUSED[label])
    assert "job name" in str(info.value) and len(str(info.value)) < 300
    assert cron.jobs == {}


@pytest.mark.parametrize(
    "what, call",
    [
        ("runner", lambda s, slot, tok: s.claim("job", slot + 1, runner="r\x00", lease_ms=LONG)),
        ("runner", lambda s, slot, tok: s.claim("job", slot + 1, runner="r\ud800", lease_ms=LONG)),
        ("token", lambda s, slot, tok: s.heartbeat("job", slot, tok + "\x00", LONG)),
        ("token", lambda s, slot, tok: s.finish("job", slot, tok + "\udcff", "success")),
        ("token", lambda s, slot, tok: s.release("job", slot, "\ud800")),
        ("error", lambda s, slot, tok: s.finish("job", slot, tok, "failed", error="bad \udcff name")),
    ],
)
def test_other_text_no_store_can_keep_is_refused(store: Store, what: str, call: Callable[..., Any]) -> None:
    """A runner, token or error text with a NUL (runner, token) or a lone surrogate raises
    ConfigError naming it, never a driver's UnicodeEncodeError; the job's run is unchanged."""
    slot = store.now_ms() - 1_000
    won = store.claim("job", slot, runner="r", lease_ms=LONG).run
    assert won is not None
    with pytest.raises(ConfigError, match=what):
        call(store, slot, won.token)
    assert store.runs("job") == [won]


@pytest.mark.parametrize("runner", ["a\x00b", "host-\udcff"])
def test_a_runner_name_no_store_can_keep_is_refused_by_leasecron(runner: str) -> None:
    """LeaseCron(runner=...) refuses a runner name with a NUL or a lone surrogate, naming it."""
    with pytest.raises(ConfigError, match="runner"):
        LeaseCron(MemoryStore(), runner=runner)


def test_jobs_with_hostile_names_run_end_to_end_beside_a_neighbour(make_cron: MakeCron, backend: Backend) -> None:
    """An instance runs jobs named with SQL, Lua, JSON, emoji and right-to-left marks, and one of
    1 024 bytes, each once and recorded under its exact name; a neighbour's run is untouched."""
    names = [HOSTILE[k] for k in ("sql", "lua", "json", "emoji", "right-to-left override", "newline")]
    names.append(HOSTILE[f"{MAX_NAME_BYTES} bytes of emoji"])
    observer = backend.open()
    slot = latest_hourly_slot(observer)
    neighbour = observer.claim(NEIGHBOUR, slot, runner="n", lease_ms=LONG, max_late_ms=NEVER_LATE)
    assert neighbour.run is not None
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    for name in names:
        cron.add_job(lambda: None, HOURLY, name=name)
    cron.start()
    for name in names:
        event = rec.wait("success", timeout=5, job=name)
        run = stored(observer, name, event.slot_ms)
        assert (run.job, run.status, run.attempt, run.runner) == (name, "success", 1, "a")
    assert rec.of("error") == [] and rec.of("failed") == []
    assert observer.get_run(NEIGHBOUR, slot) == neighbour.run
    assert sorted(observer.jobs()) == sorted([NEIGHBOUR, *names])
