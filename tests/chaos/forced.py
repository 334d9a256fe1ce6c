"""The forced failover the chaos checker judges, on any replicated store (tests/chaos/test_failover.py
on Redis through Sentinel, tests/chaos/test_pg_failover.py on a PostgreSQL primary and standby).

:func:`forced_failover` plays the part both share: two instances' stores as the chaos harness
gives them (every call logged through :class:`RecordingStore`), the next slot of :data:`JOB` on
the store's clock, the topology's ``cut_off`` (what the primary writes next reaches no replica),
``a``'s claim, the topology's ``fail_over`` (it writes the ``failover`` line of ``nemesis.jsonl``),
``b``'s claim of the same slot, ``a``'s claim sent again with its token (rule 2), ``b``'s finish,
and the checker's report on the logs and the store's records.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, Tuple, TypeVar

import leasecron
from chaoslib.checker import Config, Report, check
from chaoslib.nemesis import NemesisLog
from chaoslib.recording import Recorder, RecordingStore
from leasecron import Claim, StoreUnavailable

#: The job claimed: every 2 s, overlap allowed (no other slot decides its claims).
JOB = "long2"
LEASE_MS = 2_000
T = TypeVar("T")


def until(call: Callable[[], T], timeout: float = 30.0) -> T:
    """``call()`` again until it does not raise StoreUnavailable (the engine's retries)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def instance(url: str, logs: Path, runner: str, store: str) -> Tuple[RecordingStore, Recorder]:
    """An instance's store as the chaos harness gives it one (``store``: the kind its ``ready`` line
    names): every call logged to ``<runner>.jsonl``."""
    recorder = Recorder(logs / f"{runner}.jsonl", runner)
    recorder.log("ready", store=store, lease_ms=LEASE_MS)
    recorder.log("running")
    return RecordingStore(leasecron.open_store(url), recorder), recorder


def next_slot(store: RecordingStore) -> int:
    """Sleep until the job's next slot falls due on the store's clock; the slot."""
    now = store.now_ms()
    slot = (now // 2_000 + 1) * 2_000
    time.sleep((slot - now) / 1000)
    return slot


def forced_failover(
    logs: Path, url: str, store: str, cut_off: Callable[[], None], fail_over: Callable[[NemesisLog], None]
) -> Tuple[Report, Dict[str, object]]:
    """The sequence of the module docstring on the store at ``url`` (of kind ``store``), its logs in
    the new directory ``logs``: ``cut_off()`` once the slot fell due, ``fail_over(nemesis)`` after
    ``a``'s claim. The checker's report, and each claim's answer (``a``'s, or the StoreUnavailable
    it raised; ``b``'s; ``a again``'s)."""
    logs.mkdir()
    answers: Dict[str, object] = {}
    a, rec_a = instance(url, logs, "a", store)
    b, rec_b = instance(url, logs, "b", store)
    nemesis = NemesisLog(logs / "nemesis.jsonl")
    try:
        slot = next_slot(a)
        cut_off()
        claim: Dict[str, object] = {"runner": "a", "token": "token-a", "lease_ms": LEASE_MS, "overlap": "allow"}
        try:
            answers["a"] = a.claim(JOB, slot, **claim).outcome  # type: ignore[arg-type]
        except StoreUnavailable as exc:
            answers["a"] = exc
        fail_over(nemesis)
        won: Claim = until(lambda: b.claim(JOB, slot, runner="b", token="token-b", lease_ms=LEASE_MS))
        answers["b"] = won.outcome
        answers["a again"] = until(lambda: a.claim(JOB, slot, **claim)).outcome  # type: ignore[arg-type]
        assert until(lambda: b.finish(JOB, slot, "token-b", "success"))
        final = {JOB: [run.to_dict() for run in b.runs(JOB, limit=100)]}
    finally:
        for opened, recorder in ((a, rec_a), (b, rec_b)):
            opened.close()
            recorder.close()
        nemesis.close()
    return check(logs, final, Config(lease_ms=LEASE_MS)), answers


def assert_run_twice(report: Report, answers: Dict[str, object]) -> None:
    """What a store that acknowledged ``a``'s claim before a replica had it shows: ``a`` and ``b``
    both won attempt 1, ``a``'s retry was answered running; the checker reports attempt 1 won twice
    and ``a``'s attempt missing from the store's record, and counts the failover."""
    assert answers == {"a": "won", "b": "won", "a again": "running"}, answers
    duplicates = report.invariants["attempts_sequential"].violations
    assert any(f"{JOB}@" in v and "attempt 1 won 2 times" in v for v in duplicates), report.format_table()
    lost = report.invariants["record_last_token"].violations
    assert any("record holds attempt 1 token token-b" in v and "token token-a" in v for v in lost), lost
    assert report.effects["failovers"] == 1


def assert_no_violation(report: Report, answers: Dict[str, object]) -> None:
    """What a store that refused to confirm ``a``'s claim shows: ``a`` got StoreUnavailable (its
    message is the store's), ``b`` won the slot once, ``a``'s retry was answered running; the
    checker finds nothing, and counts the failover."""
    assert isinstance(answers["a"], StoreUnavailable), answers
    assert (answers["b"], answers["a again"]) == ("won", "running"), answers
    assert report.ok, report.format_table()
    assert report.invariants["attempts_sequential"].checked == 1
    assert report.effects["failovers"] == 1
