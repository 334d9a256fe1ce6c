"""Recovery after a SIGKILL, measured: every system's processes at once, one SIGKILL each, and the table.

All systems' processes start together; once all are up the slot is chosen
(a whole second, ``LEAD_MS`` or more later) and told to every process. Then,
per system:

* ``run`` (leasecron, APScheduler 4): the first process whose handler starts
  (at the slot) is SIGKILLed ``KILL_AFTER_S`` into the run (its handler
  holds ``recovery.HOLD_S``). Recovery: the next handler start on another
  process: leasecron's takeover of the killed run (reason ``takeover``,
  attempt 2), or for APScheduler 4 the killed job run again (same job id) or
  the schedule's next job, whichever comes first;
* ``beat`` (celery beat + RedBeat): at the slot + ``KILL_AFTER_S``, the
  process that sent the latest beat (the lock holder) is SIGKILLed.
  Recovery: the first beat sent by another process (a standby that got the
  lock; when it got it is noted too).

Times are this host's ``time.time_ns()``: the kill (just before
``os.kill``) and the start or beat (noted by the process itself). A system
that does not recover within ``--recovery-deadline`` seconds of its kill is
given up on: "no takeover within N s" (and, for APScheduler 4, what its
tables hold then).
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field
from queue import Empty
from typing import Any, Dict, List, Optional

from fire_lag import READY_TIMEOUT_S, Instances, utc

from . import LEASECRON, say
from .recovery import Contender

#: The slot comes at least this long after every process is up.
LEAD_MS = 2_000
#: The process is killed this long into its run (beat: after the slot).
KILL_AFTER_S = 1.0
#: The run (a beat) must start within this long of the slot.
START_TIMEOUT_S = 20.0
#: How long processes may take to add the job and start once told the slot.
BOOT_TIMEOUT_S = 30.0


@dataclass
class Recovery:
    """One system's recovery after its SIGKILL."""

    system: str
    scheduler: str
    store: str
    lease: str  # the lease (lock) it ran with, as printed
    killed: Optional[str]  # the process killed ("i<n>": its index among the system's processes)
    recovered_s: Optional[float]  # SIGKILL -> the next start (beat) on another process; None: not within the deadline
    by: Optional[str]
    what: str
    deadline_s: float
    notes: List[str] = field(default_factory=list)
    vs_leasecron: Optional[float] = None  # recovered_s / leasecron's on the same store
    vs_leasecron_at_least: Optional[float] = None  # no recovery: deadline_s / leasecron's


class Watch:
    """One system's processes during the measurement: who to kill, when, and who took over."""

    def __init__(self, contender: Contender, group: Instances, booted: List[Dict[str, Any]],
                 ready: List[Dict[str, Any]], first_ms: int, deadline_s: float) -> None:  # fmt: skip
        self.c, self.group, self.first_ms, self.deadline_s = contender, group, first_ms, deadline_s
        self.identities = [str(m.get("identity", "")) for m in ready]
        self.lease = contender.lock or lease_of(booted[0])
        self.victim: Optional[int] = None
        self.victim_start: Dict[str, Any] = {}
        self.kill_at_ns: Optional[int] = None
        self.killed_ns: Optional[int] = None
        self.last_beat: Dict[int, int] = {}
        self.result: Optional[Recovery] = None
        self.notes: List[str] = []

    def poll(self) -> None:
        """Read what the processes said, kill when due, and settle the result when it is known."""
        while self.result is None:
            try:
                i, message = self.group.inbox.get_nowait()
            except Empty:
                break
            self.on_message(i, message)
        now = time.time_ns()
        if self.result is not None:
            return
        if self.c.kind == "beat" and self.victim is None and now >= (self.first_ms + KILL_AFTER_S * 1000) * 1e6:
            if not self.last_beat:
                raise RuntimeError(f"{self.c.label}: no beat sent by {KILL_AFTER_S:g} s after the slot")
            self.victim = max(self.last_beat, key=lambda i: self.last_beat[i])
            self.kill_at_ns = now
        if self.kill_at_ns is not None and self.killed_ns is None and now >= self.kill_at_ns:
            assert self.victim is not None
            self.killed_ns = time.time_ns()
            os.kill(self.group.procs[self.victim].pid, signal.SIGKILL)
        if self.victim is None and now > (self.first_ms + START_TIMEOUT_S * 1000) * 1e6:
            raise RuntimeError(f"{self.c.label}: no run started within {START_TIMEOUT_S:g} s of the slot")
        if self.killed_ns is not None and now > self.killed_ns + self.deadline_s * 1e9:
            self.settle(None, None, f"no takeover within {self.deadline_s:g} s")

    def on_message(self, i: int, message: Dict[str, Any]) -> None:
        """One line from process ``i``."""
        ev = message["ev"]
        if ev == "exited":
            if i != self.victim:
                raise RuntimeError(f"{self.c.label}: process i{i} exited: {self.group.tail(i)}")
            return
        after_kill = self.killed_ns is not None and i != self.victim and int(message.get("wall_ns", 0)) > self.killed_ns
        if ev == "start":
            if self.victim is None:
                self.victim, self.victim_start = i, message
                self.kill_at_ns = int(message["wall_ns"] + KILL_AFTER_S * 1e9)
            elif after_kill:
                self.settle(i, message, self.what_started(message))
            elif i != self.victim:
                self.notes.append(f"i{i} also started the slot {utc(int(message['slot_ms']))} before the kill")
        elif ev == "beat":
            if after_kill:
                self.settle(i, message, "the next beat, sent by a standby")
            elif self.killed_ns is None:
                if self.last_beat and i not in self.last_beat:
                    self.notes.append(f"i{i} sent beats too before the kill (two lock holders?)")
                self.last_beat[i] = int(message["wall_ns"])
        elif ev == "lock" and after_kill:
            assert self.killed_ns is not None
            self.notes.append(f"i{i} got the lock {(int(message['wall_ns']) - self.killed_ns) / 1e9:.2f} s"
                              " after the kill")  # fmt: skip

    def what_started(self, message: Dict[str, Any]) -> str:
        """What the run that started after the kill is, against the killed one."""
        if "job_id" in message:  # APScheduler 4
            same = message["job_id"] == self.victim_start.get("job_id")
            return "the killed job, run again" if same else "the schedule's next job"
        if message.get("reason") == "takeover":
            return f"the killed run, taken over (attempt {message.get('attempt')})"
        return f"a run of the slot {utc(int(message['slot_ms']))} ({message.get('reason')})"

    def settle(self, i: Optional[int], message: Optional[Dict[str, Any]], what: str) -> None:
        """The result: recovered by process ``i`` with ``message``, or not at all (``i`` None)."""
        assert self.killed_ns is not None
        recovered = None if message is None else (int(message["wall_ns"]) - self.killed_ns) / 1e9
        if message is None and self.c.probe is not None and self.victim is not None:
            try:
                self.notes.append(self.c.probe(self.identities[self.victim]))
            except Exception as exc:  # noqa: BLE001 - a note, not a figure
                self.notes.append(f"its tables could not be read: {exc}")
        self.result = Recovery(
            system=self.c.label, scheduler=self.c.scheduler, store=self.c.store_name, lease=self.lease,
            killed=None if self.victim is None else f"i{self.victim}", recovered_s=recovered,
            by=None if i is None else f"i{i}", what=what, deadline_s=self.deadline_s, notes=self.notes,
        )  # fmt: skip


def lease_of(booted: Dict[str, Any]) -> str:
    """The lease a process said it runs with."""
    if "lease_ms" in booted:
        return f"lease_ms {booted['lease_ms']}, heartbeat_ms {booted['heartbeat_ms']}"
    if "lease_s" in booted:
        return f"lease_duration {booted['lease_s']:g} s"
    return "?"


def run_recovery(contenders: List[Contender], processes: int, deadline_s: float, workdir: str) -> List[Recovery]:
    """Start every system's processes, choose the slot, kill one process of each, and wait for each
    system's recovery (or its deadline); every process is stopped on the way out."""
    groups: List[Instances] = []
    try:
        for c in contenders:
            slug = c.label.replace(", ", "-").replace(" ", "_").replace("+", "")
            groups.append(Instances(processes, c.argv, workdir, f"recovery-{slug}"))
        ready = [group.wait_all("ready", READY_TIMEOUT_S) for group in groups]
        first = math.ceil((time.time() * 1000 + LEAD_MS) / 1000) * 1000
        for group in groups:
            group.send({"first_slot_ms": first})
        booted = [group.wait_all("booted", BOOT_TIMEOUT_S) for group in groups]
        say(f"recovery: all up; the slot: {utc(first)} UTC")
        watches = [Watch(c, g, b, r, first, deadline_s) for c, g, b, r in zip(contenders, groups, booted, ready)]
        while any(w.result is None for w in watches):
            for watch in watches:
                watch.poll()
            time.sleep(0.01)
    finally:
        say("recovery: stopping every process")
        for group in groups:  # every group's pipes first: they all stop at once
            for proc in group.procs:
                if proc.stdin is not None and not proc.stdin.closed:
                    try:
                        proc.stdin.close()
                    except OSError:  # it is gone already
                        pass
        for group in groups:
            group.stop()
    results = []
    for watch in watches:
        assert watch.result is not None
        for k, proc in enumerate(watch.group.procs):
            if k != watch.victim and proc.returncode != 0:
                watch.result.notes.append(f"i{k} exited with {proc.returncode}: {watch.group.tail(k, 3)}")
        results.append(watch.result)
    compare_recovery(results)
    return results


def compare_recovery(rows: List[Recovery]) -> None:
    """Each row's recovery against leasecron's on the same store."""
    base = {row.store: row for row in rows if row.scheduler == LEASECRON}
    for row in rows:
        ref = base.get(row.store)
        if ref is None or not ref.recovered_s:
            continue
        if row.recovered_s is not None:
            row.vs_leasecron = row.recovered_s / ref.recovered_s
        else:
            row.vs_leasecron_at_least = row.deadline_s / ref.recovered_s


def print_recovery(rows: List[Recovery], processes: int) -> None:
    """The second table: one row per system, then what recovered and the notes."""
    print(f"recovery after a SIGKILL ({processes} processes per system, all systems at once; the process running"
          f" the job's run killed {KILL_AFTER_S:g} s into it, or beat's lock holder {KILL_AFTER_S:g} s after the slot)")
    width = max(len(row.system) for row in rows)
    lease_w = max(len(row.lease) for row in rows)
    print(f"{'system':<{width}}  {'lease / lock':<{lease_w}}  {'killed':>6}  {'recovered after':>24}  {'by':>3}"
          f"  {'x leasecron':>11}")  # fmt: skip
    for row in rows:
        after = f"{row.recovered_s:.2f} s" if row.recovered_s is not None else row.what
        if row.vs_leasecron is not None:
            ratio = f"{row.vs_leasecron:.2f}x"
        elif row.vs_leasecron_at_least is not None:
            ratio = f">{row.vs_leasecron_at_least:.2f}x"
        else:
            ratio = "-"
        print(f"{row.system:<{width}}  {row.lease:<{lease_w}}  {row.killed or '-':>6}  {after:>24}  {row.by or '-':>3}"
              f"  {ratio:>11}")  # fmt: skip
    print("  recovered after: from the SIGKILL to the next handler start (beat sent) on another process,"
          " this host's clock; x: against leasecron on the same store")  # fmt: skip
    for row in rows:
        said = row.what if row.recovered_s is not None else "nothing ran again"
        print(f"{row.system}: {said}" + "".join(f"; {note}" for note in row.notes[:4]))
