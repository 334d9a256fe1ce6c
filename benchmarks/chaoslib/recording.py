"""What a chaos instance writes: its JSON-lines log, and a store that logs every call it makes.

:class:`Recorder` appends one JSON object per line (``ev``, ``runner``, ``pid``, ``wall_ns``,
``mono_ns`` and the line's fields; see :mod:`chaoslib.worker` for every ``ev``);
:class:`RecordingStore` wraps the real store and logs each claim, heartbeat, finish and
release once it returned (or raised), with the monotonic times around it (a claim or finish of
a batch: around the batch).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from leasecron import Claim, Run, RunBrief, Store
from leasecron.stores import ClaimRequest, DelegatingStore, Finish

__all__ = ["Recorder", "RecordingStore", "error_text"]


def error_text(exc: BaseException) -> str:
    """``"Type: message"`` of an exception, for a log line."""
    return f"{type(exc).__name__}: {exc}"


class Recorder:
    """Appends JSON lines to the log: one ``write`` per line, under a lock."""

    def __init__(self, path: Path, runner: str, skew_ms: int = 0) -> None:
        self.runner = runner
        self._skew_ns = skew_ms * 1_000_000  # the host's wall clock as this process sees it, minus the truth
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._file = open(path, "ab", buffering=0)  # unbuffered: each write() is one append

    def log(self, ev: str, **fields: Any) -> None:
        """Append one line: ``ev``, ``runner``, ``pid``, ``wall_ns``, ``mono_ns`` and ``fields``."""
        with self._lock:
            line = {
                "ev": ev,
                "runner": self.runner,
                "pid": self._pid,
                "wall_ns": time.time_ns() - self._skew_ns,
                "mono_ns": time.monotonic_ns(),
                **fields,
            }
            self._file.write((json.dumps(line, separators=(",", ":")) + "\n").encode())
            self._file.flush()

    def close(self) -> None:
        """Close the log file."""
        with self._lock:
            self._file.close()


class RecordingStore(DelegatingStore):
    """A real store with every claim, heartbeat, finish and release logged.

    Each call is passed on unchanged; the line is written once the call
    returned (or raised), with the monotonic times around it. Other methods
    pass through (:class:`~leasecron.stores.DelegatingStore`). It remembers the attempt of each token it saw won, so
    heartbeat, finish and release lines carry the attempt too.
    """

    def __init__(self, store: Store, recorder: Recorder) -> None:
        super().__init__(store)
        self._rec = recorder
        self._attempts: Dict[str, int] = {}

    # -- logged ----------------------------------------------------------------------

    def _claim(self, request: ClaimRequest) -> Claim:
        return self._logged([request], lambda: [self.inner._claim(request)])[0]

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """A batch: one line per claim, each with the times around the whole batch."""
        return self._logged(requests, lambda: self.inner._claim_many(requests))

    def _logged(self, requests: List[ClaimRequest], call: Callable[[], List[Claim]]) -> List[Claim]:
        t0 = time.monotonic_ns()
        try:
            claims = call()
        except Exception as exc:
            t1 = time.monotonic_ns()
            for request in requests:
                self._rec.log(
                    "claim", job=request.job, slot_ms=request.slot_ms, reason=request.reason, outcome=None,
                    version=request.version, error=error_text(exc), t0_mono_ns=t0, t1_mono_ns=t1,
                )  # fmt: skip
            raise
        t1 = time.monotonic_ns()
        for request, claim in zip(requests, claims):
            run = claim.run
            if claim.won and run is not None:
                self._attempts[run.token] = run.attempt
            self._rec.log(
                "claim", job=request.job, slot_ms=request.slot_ms, reason=request.reason, outcome=claim.outcome,
                version=request.version, t0_mono_ns=t0, t1_mono_ns=t1, **_run_fields(claim.found),
            )  # fmt: skip
        return claims

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        return self._call(
            "heartbeat", job, slot_ms, token, {}, lambda: self.inner._heartbeat(job, slot_ms, token, lease_ms)
        )

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        extra = {"status": status, "failure": error}
        return self._call(
            "finish", job, slot_ms, token, extra, lambda: self.inner._finish(job, slot_ms, token, status, error)
        )

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """Finishes sent in one round trip (runs that ended together): one line per finish, each
        with the times around the whole batch."""
        sent = time.monotonic_ns()
        try:
            answers = self.inner._finish_many(finishes)
        except Exception as exc:
            recv = time.monotonic_ns()
            for f in finishes:
                self._rec.log(
                    "finish", ok=None, error=error_text(exc), sent_mono_ns=sent, recv_mono_ns=recv,
                    **self._ids(f.job, f.slot_ms, f.token), status=f.status, failure=f.error,
                )  # fmt: skip
            raise
        recv = time.monotonic_ns()
        for f, ok in zip(finishes, answers):
            self._rec.log(
                "finish", ok=bool(ok), sent_mono_ns=sent, recv_mono_ns=recv,
                **self._ids(f.job, f.slot_ms, f.token), status=f.status, failure=f.error,
            )  # fmt: skip
        return answers

    def _ids(self, job: str, slot_ms: int, token: str) -> Dict[str, Any]:
        return {"job": job, "slot_ms": slot_ms, "token": token, "attempt": self._attempts.get(token)}

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return self._call("release", job, slot_ms, token, {}, lambda: self.inner._release(job, slot_ms, token))

    def _call(self, ev: str, job: str, slot_ms: int, token: str, extra: Dict[str, Any], call: Any) -> bool:
        ids = self._ids(job, slot_ms, token)
        sent = time.monotonic_ns()
        try:
            ok = bool(call())
        except Exception as exc:
            recv = time.monotonic_ns()
            self._rec.log(ev, ok=None, error=error_text(exc), sent_mono_ns=sent, recv_mono_ns=recv, **ids, **extra)
            raise
        recv = time.monotonic_ns()
        self._rec.log(ev, ok=ok, sent_mono_ns=sent, recv_mono_ns=recv, **ids, **extra)
        return ok


def _run_fields(run: Union[Run, RunBrief, None]) -> Dict[str, Any]:
    """The fields of the run an answer is about: a whole :class:`Run`, or the brief that a
    ``running`` or ``done`` answer carries (no start time: ``run_started_ms`` is None)."""
    if run is None:
        return {"attempt": None, "token": None, "lease_end_ms": None, "run_slot_ms": None,
                "run_status": None, "run_runner": None, "run_started_ms": None}  # fmt: skip
    return {
        "attempt": run.attempt,
        "token": run.token,
        "lease_end_ms": run.lease_end_ms,
        "run_slot_ms": run.slot_ms,
        "run_status": run.status,
        "run_runner": run.runner,
        "run_started_ms": run.started_ms if isinstance(run, Run) else None,
    }
