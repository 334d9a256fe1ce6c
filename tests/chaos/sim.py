"""Synthetic chaos logs for the checker's specification (``test_checker*.py``): no processes.

:class:`Sim` writes instance, nemesis and operator lines and the store's final records, then
runs the checker. :func:`clean_run` writes the logs of three instances (A, B, C) that show
every kind of event the checker judges: a takeover after SIGKILL, a takeover of a frozen
runner whose heartbeat is refused after SIGCONT, a hand-over after SIGTERM, a skipped overlap,
a refused late claim, a planned failure, a triggered run, a claim answered ``paused``, a run
that ignores its timeout for a while and one retried after a failed try, a code job rescheduled
and reset and a stored job put and deleted (:mod:`tests.chaos.sim_schedules`), a runner cut off
from the store that gives its run up by its local deadline (:mod:`tests.chaos.sim_margin`), with the attempts
each record holds. It passes; each test breaks one thing and expects the
invariant that names it to report a violation (:func:`found`, :func:`assert_violates`,
:func:`assert_clean`). Times are ms on one clock (``mono_ns`` and ``wall_ns`` alike), slots
are ms too.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

from chaoslib.checker import DEFAULT_JOBS, Config, Report, check

from .sim_margin import cut_off
from .sim_schedules import schedules

__all__ = [
    "HB", "LEASE", "TIMED_OUT", "Sim", "assert_clean", "assert_violates", "clean_run", "found", "ns", "resume_later",
]  # fmt: skip

LEASE, HB = 2_000, 500
#: The error of a ``timeout2`` run that ran past its ``timeout_ms``.
TIMED_OUT = f"timed out after {DEFAULT_JOBS['timeout2'].timeout_ms} ms"


def ns(ms: float) -> int:
    """Milliseconds to nanoseconds."""
    return int(ms * 1_000_000)


def found(report: Report, name: str) -> List[str]:
    """The violations of ``name``, after checking it judged something."""
    inv = report.invariants[name]
    assert inv.checked + inv.skipped > 0, report.format_table()
    return inv.violations


def assert_violates(report: Report, name: str, text: str) -> None:
    """``name`` reports a violation whose message holds ``text``."""
    assert any(text in v for v in found(report, name)), report.format_table()


def assert_clean(report: Report, name: str) -> None:
    """``name`` reports nothing."""
    assert found(report, name) == [], report.format_table()


def assert_skipped(report: Report, name: str) -> None:
    """``name`` reports nothing and skipped one case it could not judge (a fault may explain it)."""
    assert_clean(report, name)
    assert report.invariants[name].skipped == 1, report.format_table()


class Sim:
    """Builds instance logs, nemesis lines and final records; writes them and runs the checker."""

    def __init__(self, tmp_path: Path, store: str = "sqlite") -> None:
        self.dir = tmp_path / "logs"
        self.tmp_path = tmp_path
        self.store = store
        self.logs: Dict[str, List[Dict[str, Any]]] = {}
        self.pids: Dict[str, int] = {}
        self.records: Dict[str, List[Dict[str, Any]]] = {}
        self.sink_rows: Optional[Dict[tuple, tuple]] = None

    # -- lines -------------------------------------------------------------------------------

    def line(self, runner: str, ev: str, at: float, **fields: Any) -> Dict[str, Any]:
        """One line of ``runner``'s log at ``at`` ms."""
        line = {"ev": ev, "runner": runner, "pid": self.pids[runner], "wall_ns": ns(at), "mono_ns": ns(at), **fields}
        self.logs.setdefault(runner, []).append(line)
        return line

    def instance(self, runner: str, pid: int, at: float = 0) -> None:
        """An instance that logs ready and running."""
        self.pids[runner] = pid
        self.line(runner, "ready", at, store=self.store, lease_ms=LEASE, heartbeat_ms=HB)
        self.line(runner, "running", at + 1)

    def nemesis(self, action: str, at: float, runner: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        """A nemesis line (``pid`` of ``runner`` when given)."""
        line = {"ev": "nemesis", "action": action, "runner": runner, "pid": self.pids.get(runner or ""),
                "wall_ns": ns(at), "mono_ns": ns(at), **fields}  # fmt: skip
        self.logs.setdefault("nemesis", []).append(line)
        return line

    def final_stop(self, at: float) -> Dict[str, Any]:
        """The harness's ``final-stop`` line (``harness.jsonl``): its final SIGTERMs begin at ``at``."""
        line = {"ev": "final-stop", "wall_ns": ns(at), "mono_ns": ns(at)}
        self.logs.setdefault("harness", []).append(line)
        return line

    def claim(
        self, runner: str, job: str, slot: int, at: float, outcome: str, reason: str = "schedule",
        attempt: Optional[int] = None, token: Optional[str] = None, run_slot: Optional[int] = None,
    ) -> Dict[str, Any]:  # fmt: skip
        """A claim sent at ``at`` and answered 1 ms later."""
        return self.line(
            runner, "claim", at + 1, job=job, slot_ms=slot, reason=reason, outcome=outcome, attempt=attempt,
            token=token, run_slot_ms=run_slot if run_slot is not None else (slot if token else None),
            t0_mono_ns=ns(at), t1_mono_ns=ns(at + 1),
        )  # fmt: skip

    def won(
        self, runner: str, job: str, slot: int, attempt: int, token: str, at: float, reason: str = "schedule"
    ) -> Dict[str, Any]:
        """A won claim."""
        return self.claim(runner, job, slot, at, "won", reason, attempt, token)

    def call(
        self, runner: str, ev: str, ids: Dict[str, Any], at: float, ok: Optional[bool], **fields: Any
    ) -> Dict[str, Any]:
        """A heartbeat, finish or release sent at ``at`` and answered 1 ms later."""
        return self.line(runner, ev, at + 1, ok=ok, sent_mono_ns=ns(at), recv_mono_ns=ns(at + 1), **ids, **fields)

    def ticks(self, runner: str, ids: Dict[str, Any], first: float, last: float) -> None:
        """Ticks every 10 ms from ``first`` to ``last`` inclusive."""
        t = first
        while t <= last:
            self.line(runner, "tick", t, **ids)
            t += 10

    def run(
        self, runner: str, job: str, slot: int, attempt: int, token: str, start: float, stop: float,
        outcome: str = "returned", reason: str = "schedule",
    ) -> SimpleNamespace:  # fmt: skip
        """A handler from ``start`` to ``stop`` with ticks and heartbeats; ``outcome`` returned,
        raised, or ``open`` (no end: the caller writes what happens next)."""
        ids = {"job": job, "slot_ms": slot, "attempt": attempt, "token": token}
        h = SimpleNamespace(ids=ids)
        h.start = self.line(runner, "start", start, reason=reason, **ids)
        self.ticks(runner, ids, start + 1, stop - 1)
        h.heartbeats = [self.call(runner, "heartbeat", ids, t, True) for t in range(int(start) + HB, int(stop), HB)]
        if outcome == "returned":
            h.sink = self.line(runner, "sink", stop, accepted=True, **ids)
            h.end = self.line(runner, "end", stop, outcome="returned", **ids)
            h.finish = self.call(runner, "finish", ids, stop + 1, True, status="success")
            self.line(runner, "event", stop + 3, type="success", **ids)
        elif outcome == "raised":
            h.end = self.line(runner, "end", stop, outcome="raised", **ids)
            h.finish = self.call(runner, "finish", ids, stop + 1, True, status="failed", failure="RuntimeError: x")
            self.line(runner, "event", stop + 3, type="failed", **ids)
        return h

    def tried(
        self, runner: str, job: str, slot: int, attempt: int, token: str, spans: List[tuple],
        last: str = "returned", reason: str = "schedule",
    ) -> SimpleNamespace:  # fmt: skip
        """An attempt of a job with retries: one try per ``(start, stop)`` of ``spans`` (ms), each
        but the last raising and followed by a ``retry`` event; the last ends ``last`` (returned:
        sink, finish success; raised: finish failed). Heartbeats every HB from the first start."""
        ids = {"job": job, "slot_ms": slot, "attempt": attempt, "token": token}
        h = SimpleNamespace(ids=ids, starts=[], ends=[], retries=[])
        for n, (start, stop) in enumerate(spans, 1):
            t = dict(ids, try_number=n)
            h.starts.append(self.line(runner, "start", start, reason=reason, **t))
            self.ticks(runner, t, start + 1, stop - 1)
            if n == len(spans) and last == "returned":
                self.line(runner, "sink", stop, accepted=True, **t)
                h.ends.append(self.line(runner, "end", stop, outcome="returned", **t))
                continue
            h.ends.append(self.line(runner, "end", stop, outcome="raised", **t))
            if n < len(spans):
                error = f"RuntimeError: chaos: planned failure (try {n})"
                h.retries.append(self.line(runner, "event", stop + 1, type="retry", error=error, try_number=n, **ids))
        first, stop = spans[0][0], spans[-1][1]
        h.heartbeats = [self.call(runner, "heartbeat", ids, t, True) for t in range(int(first) + HB, int(stop), HB)]
        status = "success" if last == "returned" else "failed"
        failure = None if last == "returned" else f"RuntimeError: chaos: planned failure (try {len(spans)})"
        h.finish = self.call(runner, "finish", ids, stop + 1, True, status=status, failure=failure)
        h.event = self.line(runner, "event", stop + 3, type=status, error=failure, try_number=len(spans), **ids)
        return h

    def timed_out(
        self, runner: str, job: str, slot: int, attempt: int, token: str, start: float, abort_at: float,
        stop: float, ignored: bool = True,
    ) -> SimpleNamespace:  # fmt: skip
        """A try cut short by its job's timeout: its handler sees it at ``abort_at``; ignoring it
        (``ignored``), it works on to ``stop`` and returns, else it ends aborted there. Heartbeats
        every HB throughout; then finish failed :data:`TIMED_OUT`, event failed reason timeout."""
        ids = {"job": job, "slot_ms": slot, "attempt": attempt, "token": token, "try_number": 1}
        h = SimpleNamespace(ids=ids)
        h.start = self.line(runner, "start", start, reason="schedule", **ids)
        self.ticks(runner, ids, start + 1, stop - 1)
        h.abort = self.line(runner, "abort", abort_at, reason="timeout", **ids)
        if ignored:
            h.abort["ignored_ms"] = int(stop - abort_at)
            self.line(runner, "sink", stop, accepted=True, **ids)
        h.end = self.line(runner, "end", stop, outcome="returned" if ignored else "aborted", **ids)
        h.heartbeats = [self.call(runner, "heartbeat", ids, t, True) for t in range(int(start) + HB, int(stop), HB)]
        h.finish = self.call(runner, "finish", ids, stop + 1, True, status="failed", failure=TIMED_OUT)
        h.event = self.line(runner, "event", stop + 3, type="failed", reason="timeout", error=TIMED_OUT, **ids)
        return h

    def record(
        self, job: str, slot: int, attempt: int, token: str, runner: str, status: str, error: Optional[str] = None
    ) -> Dict[str, Any]:
        """The store's final record of a slot."""
        rec = {"job": job, "slot_ms": slot, "attempt": attempt, "token": token, "runner": runner, "status": status,
               "lease_end_ms": 0, "handed_over": False, "reason": "schedule", "error": error,
               "started_ms": slot, "finished_ms": None, "slot": ""}  # fmt: skip
        self.records.setdefault(job, []).append(rec)
        return rec

    def attempts(self, job: str, slot: int, *rows: tuple) -> List[Dict[str, Any]]:
        """Give the slot's record its stored attempts, each ``(number, runner, reason, started,
        ended, outcome)``; the record's runner, reason and start become the last one's."""
        rec = next(r for r in self.records[job] if r["slot_ms"] == slot)
        keys = ("number", "runner", "reason", "started_ms", "ended_ms", "outcome")
        rec["attempts"] = [dict(zip(keys, row), error=None) for row in rows]
        rec.update(runner=rows[-1][1], reason=rows[-1][2], started_ms=rows[-1][3])
        return rec["attempts"]

    def operator(self, action: str, job: str, at: float, **fields: Any) -> Dict[str, Any]:
        """An operator's call sent at ``at`` and answered 1 ms later."""
        line = {"ev": "operator", "action": action, "job": job, "wall_ns": ns(at + 1), "mono_ns": ns(at + 1),
                "t0_mono_ns": ns(at), "t1_mono_ns": ns(at + 1), **fields}  # fmt: skip
        self.logs.setdefault("operator", []).append(line)
        return line

    def final_state(self, job: str, *requests: tuple) -> Dict[str, Any]:
        """The operator's ``final-state`` line of ``job``: its requests as ``(slot_ms, state)``."""
        kept = [{"job": job, "slot_ms": slot, "state": state} for slot, state in requests]
        return self.operator("final-state", job, 20_000, state={"job": job, "paused": False, "requests": kept})

    def sink_from_records(self) -> None:
        """A sink holding the final token of every slot recorded as a success."""
        self.sink_rows = {
            (r["job"], r["slot_ms"]): (r["attempt"], r["token"])
            for rs in self.records.values()
            for r in rs
            if r["status"] == "success"
        }

    # -- output ------------------------------------------------------------------------------

    def check(self, **config: Any) -> Report:
        """Write the logs (and the sink, if any) and run the checker."""
        self.dir.mkdir(exist_ok=True)
        for name, lines in self.logs.items():
            with open(self.dir / f"{name}.jsonl", "w") as f:
                f.writelines(json.dumps(line) + "\n" for line in lines)
        if self.sink_rows is not None:
            config.setdefault("sink", self._write_sink())
        cfg = Config(lease_ms=LEASE, heartbeat_ms=HB, max_late_ms=30_000, jobs=dict(DEFAULT_JOBS), **config)
        return check(self.dir, self.records, cfg)

    def _write_sink(self) -> Path:
        path = self.tmp_path / "sink.db"
        conn = sqlite3.connect(str(path))
        conn.execute("CREATE TABLE IF NOT EXISTS results (job, slot_ms, attempt, token, PRIMARY KEY (job, slot_ms))")
        conn.executemany(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)", [k + v for k, v in (self.sink_rows or {}).items()]
        )
        conn.commit()
        conn.close()
        return path


def clean_run(sim: Sim) -> SimpleNamespace:
    """A run with every kind of fault and no violation; returns its notable lines for the tests to break."""
    h = SimpleNamespace()
    sim.instance("A", 101)
    sim.instance("B", 102)
    # every1@1000: A runs it; B is a backup
    h.a_won_1000 = sim.won("A", "every1", 1000, 1, "a-1000", 1000)
    sim.claim("B", "every1", 1000, 1000, "running", attempt=1, token="a-1000")
    h.a_run_1000 = sim.run("A", "every1", 1000, 1, "a-1000", 1002, 1200)
    sim.record("every1", 1000, 1, "a-1000", "A", "success")
    # long2@2000: A is killed mid-run, B takes it over
    sim.won("A", "long2", 2000, 1, "a-2000", 2000)
    sim.claim("B", "long2", 2000, 2000, "running", attempt=1, token="a-2000")
    sim.run("A", "long2", 2000, 1, "a-2000", 2002, 3100, outcome="open")
    h.kill_a = sim.nemesis("kill", 3100, "A")
    sim.claim("B", "long2", 2000, 4000, "running", reason="takeover", attempt=1, token="a-2000")
    h.b_won_2000 = sim.won("B", "long2", 2000, 2, "b-2000-2", 5050, reason="takeover")
    h.b_run_2000 = sim.run("B", "long2", 2000, 2, "b-2000-2", 5052, 5600, reason="takeover")
    sim.record("long2", 2000, 2, "b-2000-2", "B", "success")
    # skip3@3000 runs 3.5 s on B, so skip3@6000 is skipped as an overlap
    h.b_won_3000 = sim.won("B", "skip3", 3000, 1, "b-3000", 3000)
    sim.run("B", "skip3", 3000, 1, "b-3000", 3002, 6500)
    sim.record("skip3", 3000, 1, "b-3000", "B", "success")
    sim.nemesis("start-instance", 3200, "C")
    sim.instance("C", 103, 3200)
    h.b_claim_6000 = sim.claim("B", "skip3", 6000, 6000, "overlap", attempt=1, token="b-3000", run_slot=3000)
    sim.claim("C", "skip3", 6000, 6000, "overlap", attempt=1, token="b-3000", run_slot=3000)
    # long2@8000: B is frozen, C takes over; B resumes, its heartbeat is refused, it logs lost
    sim.won("B", "long2", 8000, 1, "b-8000", 8000)
    sim.claim("C", "long2", 8000, 8000, "running", attempt=1, token="b-8000")
    b8 = {"job": "long2", "slot_ms": 8000, "attempt": 1, "token": "b-8000"}
    sim.line("B", "start", 8002, reason="schedule", **b8)
    sim.ticks("B", b8, 8003, 8093)
    sim.call("B", "heartbeat", b8, 8050, True)
    sim.nemesis("stop", 8100, "B")
    h.c_won_8000 = sim.won("C", "long2", 8000, 2, "c-8000-2", 10100, reason="takeover")
    h.c_run_8000 = sim.run("C", "long2", 8000, 2, "c-8000-2", 10102, 10400, reason="takeover")
    h.b_cont = sim.nemesis("cont", 10300, "B")
    h.b_tick = sim.line("B", "tick", 10301, **b8)
    h.b_refused = sim.call("B", "heartbeat", b8, 10301, False)
    h.b_lost = sim.line("B", "event", 10303, type="lost", error="heartbeat refused", **b8)
    h.b_resumed = [h.b_tick, h.b_refused, h.b_lost]
    h.b_resumed.append(sim.line("B", "abort", 10303, reason="lost", **b8))
    h.b_resumed.append(sim.line("B", "end", 10304, outcome="aborted", **b8))
    sim.record("long2", 8000, 2, "c-8000-2", "C", "success")
    # every1@10000: B fires it late after the freeze; the store refuses it
    h.b_resumed.append(sim.claim("B", "every1", 10000, 10310, "late"))
    # every1@12000: C is sent SIGTERM and hands over; B takes over
    sim.won("C", "every1", 12000, 1, "c-12000", 12000)
    sim.claim("B", "every1", 12000, 12000, "running", attempt=1, token="c-12000")
    c12 = {"job": "every1", "slot_ms": 12000, "attempt": 1, "token": "c-12000"}
    sim.line("C", "start", 12002, reason="schedule", **c12)
    sim.ticks("C", c12, 12003, 12193)
    sim.nemesis("term", 12200, "C")
    sim.line("C", "abort", 12201, reason="stop", **c12)
    sim.line("C", "end", 12202, outcome="aborted", **c12)
    sim.call("C", "release", c12, 12203, True)
    sim.line("C", "event", 12205, type="handover", **c12)
    sim.line("C", "stopped", 12300, code=0)
    sim.won("B", "every1", 12000, 2, "b-12000-2", 12700, reason="takeover")
    h.b_run_12000 = sim.run("B", "every1", 12000, 2, "b-12000-2", 12702, 12900, reason="takeover")
    sim.record("every1", 12000, 2, "b-12000-2", "B", "success")
    # every1@13000: a planned failure on B
    sim.won("B", "every1", 13000, 1, "b-13000", 13000)
    sim.run("B", "every1", 13000, 1, "b-13000", 13002, 13200, outcome="raised")
    sim.record("every1", 13000, 1, "b-13000", "B", "failed", "RuntimeError: chaos: planned failure")
    sim.nemesis("term", 13900, "B")
    sim.line("B", "stopped", 14000, code=0)
    controls(sim, h)
    tries(sim, h)
    schedules(sim, h)
    # long2@16000: M is cut off from the store and gives its run up by its local deadline; N takes over
    sim.instance("M", 113, 14100)
    sim.instance("N", 114, 14100)
    h.m_cut_off = cut_off(sim, "M", "N", 16000)
    # the attempts each record holds (rule 20)
    sim.attempts("every1", 1000, (1, "A", "schedule", 1000, 1201, "success"))
    sim.attempts(
        "long2", 2000, (1, "A", "schedule", 2000, 5050, "expired"), (2, "B", "takeover", 5050, 5601, "success")
    )
    sim.attempts("skip3", 3000, (1, "B", "schedule", 3000, 6501, "success"))
    h.stored_8000 = sim.attempts(
        "long2", 8000, (1, "B", "schedule", 8000, 10051, "expired"), (2, "C", "takeover", 10100, 10401, "success")
    )
    h.stored_12000 = sim.attempts(
        "every1", 12000, (1, "C", "schedule", 12000, 12204, "handed_over"),
        (2, "B", "takeover", 12700, 12901, "success"),
    )  # fmt: skip
    sim.attempts("every1", 13000, (1, "B", "schedule", 13000, 13201, "failed"))
    sim.sink_from_records()
    return h



def start(tmp_path: Path) -> Tuple[Sim, SimpleNamespace]:
    """A simulation holding the clean run, and the run's notable lines (:func:`clean_run`), to break."""
    sim = Sim(tmp_path)
    return sim, clean_run(sim)


def controls(sim: Sim, h: SimpleNamespace) -> None:
    """The operator's part of the clean run: every1 triggered (C runs it, B's claim finds no
    request), skip3 paused from 8400 to 9600 (C's claim of skip3@9000 is answered paused)."""
    h.trigger = sim.operator("trigger", "every1", 4500, slot_ms=4500, expires_ms=44_500, state="pending")
    h.c_won_4500 = sim.won("C", "every1", 4500, 1, "c-4500", 4700, reason="manual")
    sim.claim("B", "every1", 4500, 4705, "none", reason="manual")
    h.c_run_4500 = sim.run("C", "every1", 4500, 1, "c-4500", 4702, 4900, reason="manual")
    sim.record("every1", 4500, 1, "c-4500", "C", "success")
    h.stored_4500 = sim.attempts("every1", 4500, (1, "C", "manual", 4700, 4901, "success"))
    h.pause = sim.operator("pause", "skip3", 8400, paused_ms=8400, note="chaos pause 1")
    h.c_paused_9000 = sim.claim("C", "skip3", 9000, 9000, "paused")
    h.resume = sim.operator("resume", "skip3", 9600, now_before_ms=9600)
    sim.final_state("every1", (4500, "claimed"))
    sim.final_state("skip3")


def tries(sim: Sim, h: SimpleNamespace) -> None:
    """The timeout and the retries of the clean run: C's timeout2@4000 ignores its timeout (at
    5002) until 6600, renewed all along, and is recorded timed out; B's retry2@6000 fails try 1
    and succeeds at try 2."""
    h.c_won_t4000 = sim.won("C", "timeout2", 4000, 1, "c-t4000", 4000)
    sim.claim("B", "timeout2", 4000, 4000, "running", attempt=1, token="c-t4000")
    h.c_timeout_4000 = sim.timed_out("C", "timeout2", 4000, 1, "c-t4000", 4002, 5002, 6600)
    h.rec_t4000 = sim.record("timeout2", 4000, 1, "c-t4000", "C", "failed", TIMED_OUT)
    sim.attempts("timeout2", 4000, (1, "C", "schedule", 4000, 6602, "failed"))
    sim.won("B", "retry2", 6000, 1, "b-r6000", 6000)
    sim.claim("C", "retry2", 6000, 6000, "running", attempt=1, token="b-r6000")
    h.b_tries_6000 = sim.tried("B", "retry2", 6000, 1, "b-r6000", [(6002, 6200), (6302, 6500)])
    h.rec_r6000 = sim.record("retry2", 6000, 1, "b-r6000", "B", "success")
    sim.attempts("retry2", 6000, (1, "B", "schedule", 6000, 6502, "success"))


def resume_later(h: SimpleNamespace, ms: float) -> None:
    """Move B's resume after its freeze (SIGCONT, its lines) ``ms`` later: 200 + ``ms`` after C began."""
    for line in h.b_resumed + [h.b_cont]:
        for key in ("mono_ns", "wall_ns", "sent_mono_ns", "recv_mono_ns", "t0_mono_ns", "t1_mono_ns"):
            if key in line:
                line[key] += ns(ms)
