"""The chaos instances' RecordingStore logs every write, those sent in one round trip too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chaoslib.recording import Recorder, RecordingStore

import leasecron
from leasecron.stores import ClaimRequest, Finish

pytestmark = pytest.mark.timeout(30)


def test_finishes_sent_together_are_logged_one_line_each(tmp_path: Path) -> None:
    """``finish_many`` (the engine's finishes of runs that ended together): a ``finish`` line per
    finish, with its attempt, status and answer; the checker sees the end of each run."""
    recorder = Recorder(tmp_path / "i1.jsonl", "i1")
    store = RecordingStore(leasecron.open_store(f"sqlite:///{tmp_path / 'store.db'}"), recorder)
    try:
        slot = store.now_ms() - 1_000
        runs = [store.claim(job, slot, runner="i1", lease_ms=2_000).run for job in ("a", "b")]
        assert all(run is not None for run in runs)
        finishes = [Finish(run.job, run.slot_ms, run.token, "success") for run in runs if run is not None]
        finishes.append(Finish("a", slot, "0" * 32, "failed", "an old token"))
        assert store.finish_many(finishes) == [True, True, False]
    finally:
        store.close()
        recorder.close()
    lines = [json.loads(raw) for raw in (tmp_path / "i1.jsonl").read_text().splitlines()]
    logged = [(ln["job"], ln["attempt"], ln["status"], ln["failure"], ln["ok"]) for ln in lines if ln["ev"] == "finish"]
    assert logged == [("a", 1, "success", None, True), ("b", 1, "success", None, True),
                      ("a", None, "failed", "an old token", False)]  # fmt: skip
    sends = {(ln["sent_mono_ns"], ln["recv_mono_ns"]) for ln in lines if ln["ev"] == "finish"}
    assert len(sends) == 1  # one round trip


def test_a_brief_answer_is_logged_with_the_run_it_is_about(tmp_path: Path) -> None:
    """A ``running`` answer to a claim asking a brief answer (as the engine's do) is logged with the
    attempt, token, slot and status its brief carries: the checker tells whose run it was."""
    recorder = Recorder(tmp_path / "i2.jsonl", "i2")
    store = RecordingStore(leasecron.open_store(f"sqlite:///{tmp_path / 'store.db'}"), recorder)
    try:
        slot = store.now_ms() - 1_000
        won = store.claim("a", slot, runner="i1", lease_ms=2_000).run
        assert won is not None
        answer = store.claim_many([ClaimRequest("a", slot, runner="i2", lease_ms=2_000, brief=True)])[0]
        assert answer.outcome == "running" and answer.run is None and answer.brief is not None
    finally:
        store.close()
        recorder.close()
    lines = [json.loads(raw) for raw in (tmp_path / "i2.jsonl").read_text().splitlines()]
    running = [ln for ln in lines if ln["ev"] == "claim" and ln["outcome"] == "running"]
    assert [(ln["attempt"], ln["token"], ln["run_slot_ms"], ln["run_status"], ln["run_runner"]) for ln in running] == [
        (1, won.token, slot, "running", "i1")
    ]
    assert running[0]["run_started_ms"] is None  # a brief carries no start time
