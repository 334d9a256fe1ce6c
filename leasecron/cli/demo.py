"""``leasecron demo``: real worker processes share one store and one job; watch each slot run once.

Three ``python -m leasecron.cli.worker`` processes run the job ``demo`` every 2 s; the demo
SIGKILLs one runner mid-job (a backup takes the slot over) and SIGTERMs another (it hands the
run over), replaces each victim, and checks from the workers' logs and the store that every
slot ran exactly once (exit 1 if not). ``docs/operating.rst`` (The demo) shows a run.

This module holds the story: when to signal whom, and following the victim's slot to its
takeover. What the demo runs and promises is :mod:`.demo_plan`; the worker processes are
:mod:`.demo_workers`; the judgement, :mod:`.demo_verdict`; what it prints, :mod:`.demo_output`.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from ..errors import ConfigError
from ..stores import open_store
from ..stores.urls import masked_url
from .demo_output import Printer, clock, event_text, print_legend, print_report, print_verdict
from .demo_plan import EVERY_MS, HANDOVER_BOUND_MS, JOB, TAKEOVER_BOUND_MS, TERM_DELAY_S, WORKERS, now_ms
from .demo_verdict import judge, stored_runs
from .demo_workers import Worker, WorkerProcesses, stderr_tail

__all__ = ["cmd_demo", "Demo"]


@dataclass
class Story:
    """One act of the demo: a signal sent to the runner of ``slot_ms``, and what followed."""

    slot_ms: int
    victim: Worker
    fire_at: float = 0.0  # monotonic time to send the signal
    signal_ms: Optional[int] = None
    wait_s: float = 0.0  # how long to wait for the takeover after the signal
    deadline: float = 0.0
    handover_ms: Optional[int] = None
    takeover: Optional[Tuple[str, Dict[str, Any]]] = None  # (runner, its start event)
    summary: str = ""  # the sentence the report prints once the takeover was seen


class Demo:
    """The demo's story: its workers, the signals it sends them, what it saw, and its report."""

    def __init__(self, seconds: float, store_url: Optional[str], workdir: str) -> None:
        self.seconds = seconds
        self.temporary = store_url is None
        self.url = store_url or f"sqlite:///{os.path.join(workdir, 'demo.db')}"
        self.out = Printer()
        self.events: "queue.Queue[Tuple[Worker, Dict[str, Any]]]" = queue.Queue()
        history = int(self.seconds * 1000 / EVERY_MS) + 100  # keep every run of the demo
        self.processes = WorkerProcesses(self.url, workdir, history, self.events)
        self.log: List[Tuple[str, Dict[str, Any]]] = []  # every worker event, in arrival order
        self.active: Dict[Tuple[Any, Any], str] = {}  # (slot, attempt) -> runner, between start and end
        self.succeeded: Set[Any] = set()
        self.phase = "kill-wait"
        self.kill: Optional[Story] = None
        self.term: Optional[Story] = None
        self.notes: List[str] = []

    # -- the workers --------------------------------------------------------------------

    def spawn(self) -> Worker:
        """Start one more worker."""
        return self.processes.spawn()

    def restart(self, victim: Worker) -> None:
        new = self.spawn()
        self.say(f"restarting {victim.name} as {new.name} (pid {new.proc.pid})")

    def send(self, worker: Worker, signum: int, fate: str, slot_ms: Optional[int] = None) -> int:
        sent = self.processes.signal(worker, signum, fate)
        if slot_ms is not None:
            what = "it dies on the spot" if signum == signal.SIGKILL else "a graceful stop"
            self.say(f"{signal.Signals(signum).name} {worker.name} (pid {worker.proc.pid}) mid-job: {what}",
                     slot_ms, t=sent)  # fmt: skip
        return sent

    def say(self, text: str, slot_ms: Optional[int] = None, t: Optional[int] = None) -> None:
        self.out.add(now_ms() if t is None else t, "demo", slot_ms, "=> " + text)

    # -- the run ----------------------------------------------------------------------

    def run(self) -> int:
        start = time.monotonic()
        self.launch_ms = now_ms()
        self.kill_at = start + self.seconds / 3
        self.term_at = start + 2 * self.seconds / 3
        end_at = start + self.seconds
        self.legend()
        for _ in range(WORKERS):
            self.spawn()
        ending_deadline = None
        while True:
            self.pump(0.05)
            mono = time.monotonic()
            self.tick(mono)
            if ending_deadline is None and mono >= end_at and self.phase in ("kill-wait", "term-wait", "done"):
                self.give_up_waiting()
                ending_deadline = mono + 2 * EVERY_MS / 1000 + 1
            if ending_deadline is not None and self.quiet():
                break
            if ending_deadline is not None and mono >= ending_deadline:
                self.notes.append("no quiet moment between runs came: the workers were stopped while a run was live")
                break
        self.say(f"time is up: SIGTERM to every worker ({', '.join(w.name for w in self.processes.alive())})")
        self.stop_all()
        self.out.flush(everything=True)
        return self.report()

    def report(self) -> int:
        """Print the stored runs, the stories and the verdict; return the verdict's exit code."""
        stored = stored_runs(self.url, self.launch_ms)
        marks = {}
        stories = [(self.kill, "SIGKILLed"), (self.term, "SIGTERMed")]
        for story, what in stories:
            if story is not None and story.signal_ms is not None:
                marks[story.slot_ms] = f"<- {story.victim.name} {what} mid-job"
        summaries = [story.summary for story, _ in stories if story is not None and story.summary]
        print_report(stored, marks, summaries, self.notes)
        verdict = judge(self.log, stored)
        print_verdict(verdict, self.seconds)
        return verdict.exit_code

    def pump(self, wait_s: float) -> None:
        try:
            worker, event = self.events.get(timeout=wait_s)
            while True:
                self.on_event(worker, event)
                worker, event = self.events.get_nowait()
        except queue.Empty:
            pass
        self.out.flush()

    def legend(self) -> None:
        where = f"{self.url} (temporary, removed at the end)" if self.temporary else masked_url(self.url)
        print_legend(where, self.seconds)

    # -- events and the story -----------------------------------------------------------

    def on_event(self, worker: Worker, ev: Dict[str, Any]) -> None:
        kind = ev.get("event")
        t, slot, attempt = ev.get("t") or now_ms(), ev.get("slot_ms"), ev.get("attempt")
        if kind != "exit":
            self.log.append((worker.name, ev))
        if kind == "start":
            self.active[(slot, attempt)] = worker.name
        elif kind in ("success", "failed", "handover", "lost"):
            self.active.pop((slot, attempt), None)
            if kind == "success":
                self.succeeded.add(slot)
        elif kind == "exit":
            worker.exited = True
            self.active = {k: v for k, v in self.active.items() if v != worker.name}
        text = self.describe(worker, ev)
        if text:
            self.out.add(t, worker.name, slot, text)
        self.advance(worker, kind, ev, t, slot, attempt or 0)

    def describe(self, worker: Worker, ev: Dict[str, Any]) -> Optional[str]:
        if ev.get("event") == "exit":
            code = ev["code"]
            if code < 0:
                if worker.fate != "killed":
                    self.notes.append(f"{worker.name} was ended by {signal.Signals(-code).name}")
                return f"process ended by {signal.Signals(-code).name}"
            if code != 0 or worker.fate not in ("terminated", "stopping"):
                self.notes.append(f"{worker.name} exited on its own (code {code})")
                return f"process exited with code {code}" + stderr_tail(worker)
            return None
        return event_text(ev)

    def advance(self, worker: Worker, kind: Any, ev: Dict[str, Any], t: int, slot: Any, attempt: int) -> None:
        """Move the story on: pick a victim, then follow its slot to attempt 2."""
        mono = time.monotonic()
        serving = worker.fate == "" and not worker.exited
        if kind == "handler-start" and attempt == 1 and serving:
            if self.phase == "kill-wait" and mono >= self.kill_at:
                wait_s = TAKEOVER_BOUND_MS / 1000 + 3
                self.kill = Story(slot, worker, wait_s=wait_s, deadline=mono + wait_s)
                self.kill.signal_ms = self.send(worker, signal.SIGKILL, "killed", slot)
                self.phase = "kill-watch"
            elif self.phase == "term-wait" and mono >= self.term_at:
                self.term = Story(slot, worker, fire_at=mono + TERM_DELAY_S, wait_s=5.0)
                self.phase = "term-pending"
        story = self.kill if self.phase == "kill-watch" else self.term if self.phase == "term-watch" else None
        if story is None or slot != story.slot_ms:
            return
        if kind == "success" and worker is story.victim:  # the handler ended before the signal landed
            self.say("its run had already finished when the signal landed: trying again on a later slot", slot)
            self.restart(story.victim)
            if story is self.kill:
                self.kill, self.phase = None, "kill-wait"
            else:
                self.term, self.phase = None, "term-wait"
            return
        if kind == "handover" and worker is story.victim:
            story.handover_ms = t
        if kind == "start" and attempt >= 2:
            story.takeover = (worker.name, ev)
        if story.takeover is not None and (story is self.kill or story.handover_ms is not None):
            self.conclude(story)

    def conclude(self, story: Story) -> None:
        """The takeover of the story's slot was seen: say how long it took, against the bound."""
        assert story.takeover is not None and story.signal_ms is not None
        runner, ev = story.takeover
        victim, signalled, slot = story.victim.name, clock(story.signal_ms), clock(story.slot_ms)
        if story is self.kill:
            delay, bound, after = ev["t"] - story.signal_ms, TAKEOVER_BOUND_MS, "the kill"
            rule = f"lease + 2 x heartbeat = {bound} ms after the last heartbeat"
            story.summary = (
                f"Crash:     {victim} was SIGKILLed mid-job at {signalled} (slot {slot}); {runner} took the slot"
                f" over as attempt {ev['attempt']} {delay} ms later (bound: {rule})."
            )
            self.phase = "term-wait"
        else:
            # Measured from the SIGTERM, not from the victim's handover line: both ends are then
            # read in order on one clock, and the delay can only be overestimated, never negative.
            assert story.handover_ms is not None
            delay, bound, after = ev["t"] - story.signal_ms, HANDOVER_BOUND_MS, "the SIGTERM"
            rule = f"2 x heartbeat = {bound} ms after the release"
            story.summary = (
                f"Hand-over: {victim} was SIGTERMed mid-job at {signalled} (slot {slot}) and handed the run over"
                f" ({story.handover_ms - story.signal_ms} ms later by its own clock); {runner} ran it as attempt"
                f" {ev['attempt']} {delay} ms after the SIGTERM (bound: {rule})."
            )
            self.phase = "done"
        verdict = "within" if delay <= bound else "OVER"
        self.say(f"{runner} took over {delay} ms after {after}: {verdict} the bound ({rule})", story.slot_ms, t=ev["t"])
        self.restart(story.victim)

    def tick(self, mono: float) -> None:
        if self.phase == "term-pending" and self.term is not None and mono >= self.term.fire_at:
            story = self.term
            if story.victim.exited or story.slot_ms in self.succeeded:
                self.phase = "term-wait"  # too late for this one: the next slot
                return
            story.signal_ms = self.send(story.victim, signal.SIGTERM, "terminated", story.slot_ms)
            story.deadline = mono + story.wait_s
            self.phase = "term-watch"
        watched = self.kill if self.phase == "kill-watch" else self.term if self.phase == "term-watch" else None
        if watched is not None and mono >= watched.deadline:
            what = "no takeover" if watched is self.kill else "no hand-over and takeover"
            self.say(f"{what} of this slot seen within {watched.wait_s:.1f} s", watched.slot_ms)
            self.notes.append(f"{what} was seen after the {'kill' if watched is self.kill else 'SIGTERM'}")
            self.restart(watched.victim)
            self.phase = "term-wait" if watched is self.kill else "done"

    def give_up_waiting(self) -> None:
        if self.phase == "kill-wait":
            self.notes.append(f"the kill and takeover could not be shown: {self.seconds:g} s was too short")
        if self.phase in ("kill-wait", "term-wait"):
            self.notes.append(f"the hand-over could not be shown: {self.seconds:g} s was too short")
        self.phase = "ending"

    def quiet(self) -> bool:
        """No run in progress, this slot's run succeeded, and the next slot is not close."""
        wall = now_ms()
        into = wall % EVERY_MS
        current = wall - into
        first = min((s for _, e in self.log if (s := e.get("slot_ms")) is not None), default=None)
        done = first is None or current < first or current in self.succeeded
        return not self.active and done and 300 <= into <= EVERY_MS - 700

    def stop_all(self) -> None:
        alive = self.processes.alive
        for worker in alive():
            if worker.fate == "":  # a victim of the story got its signal already
                self.send(worker, signal.SIGTERM, "stopping")
        deadline = time.monotonic() + 15
        while alive() and time.monotonic() < deadline:
            self.pump(0.05)
        for worker in alive():
            self.notes.append(f"{worker.name} did not stop within 15 s of SIGTERM: killed")
            worker.proc.kill()
        while alive():
            self.pump(0.05)


def cmd_demo(args: argparse.Namespace) -> int:
    """``leasecron demo [--seconds N] [--store URL]``."""
    if not args.seconds > 0:
        raise ConfigError(f"--seconds must be positive, not {args.seconds:g}")
    if args.store is not None:
        if args.store.lower().startswith("memory:"):
            raise ConfigError("the demo's workers are separate processes: memory:// cannot be shared; use sqlite://")
        check = open_store(args.store)  # a bad URL fails here, before any process starts
        try:
            check.get_run(JOB, 0)
        finally:
            check.close()
    workdir = tempfile.mkdtemp(prefix="leasecron-demo-")
    demo = Demo(args.seconds, args.store, workdir)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: clean up like Ctrl-C
    try:
        return demo.run()
    except KeyboardInterrupt:
        demo.out.flush(everything=True)
        raise
    finally:
        demo.processes.end()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(workdir, ignore_errors=True)
