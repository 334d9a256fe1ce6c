"""Takeover and hand-over delays with real processes: the runner SIGKILLed or SIGTERMed, again and again.

    python benchmarks/failover.py [--store URL] [--kills 10] [--terms 10] [--instances 3]
                                  [--lease-ms 1000] [--heartbeat-ms 200] [--seed N]

What it measures. ``--instances`` real OS processes (this file run with
``--child``; each a ``LeaseCron`` with a runner name of its own, ``i1.1``,
``i2.1`` …) share one store and register the same job. Its handler runs far
longer than the lease (an hour) and waits on ``ctx.signal``, so the run only
ends when its runner dies or is stopped. Each round the benchmark finds the
live run in the store (``store.unfinished(job)``: the runner, the attempt),
waits until its lease has been renewed at least once and then a random part
of a heartbeat (so that the signal falls anywhere between two heartbeats),
and sends the runner

* **SIGKILL**: a backup must take the run over as the next attempt, at most
  ``lease_ms + 2 × heartbeat_ms`` after the victim's last heartbeat
  (docs/protocol.rst, "The life of a run"); measured from the kill, which comes after
  the last heartbeat, so the same bound applies;
* **SIGTERM**: ``run_forever()`` turns it into ``stop()``, the handler is
  aborted and raises, the run is released, and a backup must take it over at
  its next check, within ``2 × heartbeat_ms`` of the release (docs/protocol.rst,
  "The life of a run").

After each round the victim is started again (a new process with a new runner
name), and the next round waits until it has read the job's unfinished runs
(its start-up recovery), so there are always ``--instances − 1`` backups.

Clocks. The headline delay is from the signal to the moment the next
attempt's handler starts, both read from ``CLOCK_MONOTONIC``
(``time.monotonic_ns()``), which every process of one host shares: the
benchmark reads it right after ``os.kill()`` returned, and the child that
won the next attempt reads it as the first thing its handler does. The
benchmark, the instances and (for Redis and PostgreSQL) the server must
therefore run on one host, which loopback URLs ensure. It includes
everything a user waits for: the lease running out, the backup's check
interval, the claim's round trip and the start of the handler's thread.

A second figure per action isolates the protocol's own part:

* kill: *last heartbeat → takeover claim*, entirely on the **store's clock**:
  the victim's last renewal is read from the store after the victim is dead
  (``lease_end_ms − lease_ms`` of its attempt) and the takeover claim's time
  is the new attempt's ``started_ms``; no clock conversion at all;
* term: *abort → next handler*, monotonic again, from the moment the victim's
  handler saw its signal aborted (just before it raised and the release was
  sent) to the next handler's start; it includes the release's round trip,
  so it is an upper bound of the delay after the release.

It prints every round (delays in ms and as ratios to the bound), then for
each figure p50, p99 and max (nearest rank), their ratios to the bound, and
the share of rounds within the bound. Target: 100 % within the bound for
both the kill and the term delays (no margin is added here; the chaos
checker, which adds the measured round trip and a margin, is the place for
a pass/fail judgement on a loaded host).

Stores. The default is a fresh SQLite file in a temporary directory. A
``redis://`` or ``valkey://`` URL without ``prefix=`` gets a fresh prefix
``leasecron-failover-<pid>``; with or without it, the benchmark uses a job
name of its own (``failover-<pid>-<time>``) and deletes exactly that job's
keys (and its member of ``<prefix>:jobs``) at the end. A ``postgresql://``
URL without ``schema=`` gets a fresh schema ``leasecron_failover_<pid>``,
created by the benchmark (it refuses to run if one of that name exists) and
dropped with ``DROP SCHEMA … CASCADE`` at the end; with ``schema=`` it uses
that schema, creates it if it does not exist (and then drops it at the end),
and otherwise deletes only its own job's rows. A SQLite URL given with
``--store`` keeps the file; the job's rows are deleted. ``memory://`` cannot
be shared by processes and is refused.

Every child process is SIGKILLed on the way out, also after an error, Ctrl-C
or SIGTERM; a child whose parent died anyway (SIGKILL) notices that its
stdin closed and exits at once.

Examples (with the short default leases a round takes 1 to 3 s, the default run under a minute)::

    python benchmarks/failover.py
    python benchmarks/failover.py --store 'redis://127.0.0.1:6379/0?prefix=failover-bench'
    python benchmarks/failover.py --store 'postgresql://127.0.0.1:5432/test'
    python benchmarks/failover.py --kills 2 --terms 2        # a quick look
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Tuple, cast
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import leasecron
from leasecron import Aborted, Context, Event, LeaseCron, Run, Store, open_store

#: The job's schedule: one slot a day (epoch-aligned, 00:00 UTC). The first run is the latest
#: slot, caught up on start (``catch_up_ms`` is a day); no other slot falls due during a run
#: unless it crosses midnight UTC, which the benchmark copes with (see :func:`next_start`).
DAY_S = 86_400
#: How long the handler would work: far longer than the benchmark.
HANDLER_S = 3_600.0
#: The schema a PostgreSQL run creates for itself when the URL names none.
PG_SCHEMA = "leasecron_failover_{pid}"
#: The key prefix a Redis run uses when the URL names none.
REDIS_PREFIX = "leasecron-failover-{pid}"
#: The stop timeout of the instances, in ms (a SIGTERMed instance exits well within it).
STOP_TIMEOUT_MS = 5_000

Line = Dict[str, Any]


class RoundFailed(Exception):
    """A round could not be completed (an awaited event did not come in time)."""


# ---------------------------------------------------------------------------------------------
# The child: one instance
# ---------------------------------------------------------------------------------------------


def child_main(argv: List[str]) -> int:
    """Run one instance until SIGTERM; print one JSON line per event to stdout.

    Every line has ``ev``, ``runner``, ``pid`` and ``mono_ns`` (``time.monotonic_ns()``).
    Lines: ``ready`` (started), ``recovered`` (the start-up recovery read the job's
    unfinished runs), ``handler-start`` and ``aborted`` (inside the handler), the
    instance's events ``start``, ``handover``, ``lost``, ``error``, and ``stopped``.
    """
    p = argparse.ArgumentParser(prog="failover.py --child")
    p.add_argument("--store", required=True)
    p.add_argument("--runner", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--lease-ms", type=int, required=True)
    p.add_argument("--heartbeat-ms", type=int, required=True)
    p.add_argument("--max-attempts", type=int, required=True)
    args = p.parse_args(argv)
    runner = args.runner
    lock = threading.Lock()

    def emit(ev: str, **fields: Any) -> None:
        line = {"ev": ev, "runner": runner, "pid": os.getpid(), "mono_ns": time.monotonic_ns(), **fields}
        with lock:
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()

    exit_when_parent_goes()
    store = open_store(args.store)
    wrap_unfinished(store, lambda: emit("recovered"))
    cron = LeaseCron(
        store,
        runner=runner,
        lease_ms=args.lease_ms,
        heartbeat_ms=args.heartbeat_ms,
        max_attempts=args.max_attempts,
        jitter_ms=0,
        catch_up_ms=DAY_S * 1000,
        overlap="skip",
        stop_timeout_ms=STOP_TIMEOUT_MS,
    )

    def handler(ctx: Context) -> None:
        emit("handler-start", slot_ms=ctx.slot_ms, attempt=ctx.attempt, reason=ctx.reason, token=ctx.token)
        if ctx.signal.wait(HANDLER_S):
            emit("aborted", slot_ms=ctx.slot_ms, attempt=ctx.attempt, reason=ctx.signal.reason)
            raise Aborted(ctx.signal.reason or "aborted")

    cron.add_job(handler, DAY_S, name=args.job)

    def on_event(event: Event) -> None:
        emit(event.type, slot_ms=event.slot_ms, attempt=event.attempt, reason=event.reason, error=event.error)

    for name in ("start", "handover", "lost", "error"):
        cron.on(name, on_event)
    cron.start()
    emit("ready")
    cron.run_forever()
    emit("stopped")
    store.close()
    return 0


def exit_when_parent_goes() -> None:
    """Exit at once when stdin closes: the parent died without killing this process."""

    def watch() -> None:
        # os.read on the descriptor, not sys.stdin: a daemon thread blocked inside
        # sys.stdin's buffered reader would hold its lock at interpreter shutdown,
        # and CPython aborts the process (SIGABRT) on the way out.
        try:
            while os.read(0, 4096):
                pass
        finally:
            os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def wrap_unfinished(store: Store, after_first: Callable[[], None]) -> None:
    """Call ``after_first()`` once the store's first ``unfinished()`` call returned.

    The engine calls ``unfinished`` only in a job's start-up recovery, so this
    tells the parent that the instance has become a backup of the live run.
    The wrapper is set on this store object only; leasecron is not changed.
    """
    original = store.unfinished
    done = threading.Event()

    def unfinished(job: str) -> List[Run]:
        runs = original(job)
        if not done.is_set():
            done.set()
            after_first()
        return runs

    store.unfinished = unfinished  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# The parent: the instances and what they print
# ---------------------------------------------------------------------------------------------


class Instance:
    """One child process and the thread that reads its lines."""

    def __init__(self, fleet: "Fleet", index: int, generation: int) -> None:
        self.index = index
        self.name = f"i{index}.{generation}"
        self.stderr_path = fleet.tmp / f"{self.name}.stderr"
        cmd = [
            sys.executable, os.path.abspath(__file__), "--child",
            "--store", fleet.url,
            "--runner", self.name,
            "--job", fleet.job,
            "--lease-ms", str(fleet.lease_ms),
            "--heartbeat-ms", str(fleet.heartbeat_ms),
            "--max-attempts", str(fleet.max_attempts),
        ]  # fmt: skip
        with open(self.stderr_path, "wb") as err:
            # A session of its own: a Ctrl-C at the terminal reaches only the benchmark,
            # which then kills every child itself.
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        self.reader = threading.Thread(target=fleet.read, args=(self,), name=f"read-{self.name}", daemon=True)
        self.reader.start()

    def send(self, signum: int) -> int:
        """Send a signal; ``time.monotonic_ns()`` right after ``os.kill()`` returned."""
        os.kill(self.proc.pid, signum)
        return time.monotonic_ns()

    @property
    def alive(self) -> bool:
        """Whether the process has not exited yet."""
        return self.proc.poll() is None

    def stderr_tail(self, chars: int = 2_000) -> str:
        """The end of what the process wrote to stderr."""
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Fleet:
    """The instance processes on one store URL, and every line they printed."""

    def __init__(
        self, url: str, job: str, tmp: Path, lease_ms: int, heartbeat_ms: int, max_attempts: int
    ) -> None:
        self.url = url
        self.job = job
        self.tmp = tmp
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.max_attempts = max_attempts
        self.instances: List[Instance] = []  # every process ever started
        self.current: Dict[int, Instance] = {}  # index -> the process in that place now
        self.lines: List[Line] = []
        self._cond = threading.Condition()

    def spawn(self, index: int) -> Instance:
        """Start the process for place ``index`` (a new generation if one ran there before)."""
        generation = 1 + sum(1 for i in self.instances if i.index == index)
        inst = Instance(self, index, generation)
        self.instances.append(inst)
        self.current[index] = inst
        return inst

    def by_runner(self, runner: str) -> Optional[Instance]:
        """The current instance with this runner name, if it is alive."""
        for inst in self.current.values():
            if inst.name == runner and inst.alive:
                return inst
        return None

    def read(self, inst: Instance) -> None:
        """Reader thread: every JSON line of ``inst``'s stdout into :attr:`lines`."""
        assert inst.proc.stdout is not None
        for raw in inst.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"ev": "raw", "text": raw.decode("utf-8", "replace").rstrip()}
            if not isinstance(line, dict):
                line = {"ev": "raw", "text": repr(line)}
            line.setdefault("runner", inst.name)
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self.lines.append({"ev": "eof", "runner": inst.name, "mono_ns": time.monotonic_ns()})
            self._cond.notify_all()

    def find(self, predicate: Callable[[Line], bool]) -> Optional[Line]:
        """The first line so far that matches ``predicate``."""
        with self._cond:
            return next((line for line in self.lines if predicate(line)), None)

    def wait(self, predicate: Callable[[Line], bool], timeout: float, what: str) -> Line:
        """The first line (old or new) that matches ``predicate``; :class:`RoundFailed` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        index = 0
        with self._cond:
            while True:
                while index < len(self.lines):
                    line = self.lines[index]
                    index += 1
                    if predicate(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RoundFailed(f"no {what} within {timeout:.1f} s")
                self._cond.wait(left)

    def wait_settled(self, inst: Instance, timeout: float) -> None:
        """Wait until ``inst`` is ready and its start-up recovery has read the unfinished runs."""
        for ev in ("ready", "recovered"):
            wanted = line_of(ev, inst.name)
            gone = line_of("eof", inst.name)
            line = self.wait(
                lambda line, wanted=wanted, gone=gone: wanted(line) or gone(line), timeout, f"{ev} of {inst.name}"
            )
            if line["ev"] == "eof":
                inst.proc.wait(10)
                raise RoundFailed(
                    f"instance {inst.name} exited ({inst.proc.returncode}) before {ev}:\n{inst.stderr_tail()}"
                )

    def close(self) -> None:
        """SIGKILL every process still alive, reap it, and stop its reader."""
        for inst in self.instances:
            if inst.alive:
                try:
                    inst.proc.kill()
                except ProcessLookupError:
                    pass
        for inst in self.instances:
            try:
                inst.proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                print(f"process {inst.proc.pid} ({inst.name}) did not exit", file=sys.stderr)
            for stream in (inst.proc.stdin, inst.proc.stdout):
                close_quietly(stream)
            inst.reader.join(2)

    def describe(self) -> str:
        """The stderr tails of the processes that wrote any, for an error message."""
        parts = []
        for inst in self.instances:
            tail = inst.stderr_tail()
            if tail.strip():
                parts.append(f"--- stderr of {inst.name} (exit {inst.proc.poll()}):\n{tail}")
        return "\n".join(parts)


def line_of(ev: str, runner: str) -> Callable[[Line], bool]:
    """A predicate: a line ``ev`` printed by ``runner``."""
    return lambda line: line["ev"] == ev and line["runner"] == runner


def close_quietly(stream: Optional[IO[bytes]]) -> None:
    """Close a pipe, ignoring a broken one."""
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Sample:
    """One round: what was signalled, who took over, and the delays (ms; None if not measured)."""

    action: str  # "kill" or "term"
    victim: str
    slot_ms: int
    attempt: int
    taker: Optional[str] = None
    taker_slot_ms: Optional[int] = None
    taker_attempt: Optional[int] = None
    taker_reason: Optional[str] = None
    delay_ms: Optional[float] = None  # signal -> the next attempt's handler starts (monotonic)
    # kill: last heartbeat -> takeover claim (store clock); term: abort -> next handler
    inner_ms: Optional[float] = None
    note: str = ""


def live_run(fleet: Fleet, store: Store, timeout: float) -> Tuple[Run, Instance]:
    """The job's live run whose handler started and whose lease was renewed once, and its runner."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = store.now_ms()
        for run in reversed(store.unfinished(fleet.job)):  # newest slot first
            inst = fleet.by_runner(run.runner)
            if inst is None or not run.lease_alive(now):
                continue
            started = fleet.find(
                lambda line, run=run: line["ev"] == "handler-start"
                and line["runner"] == run.runner
                and line["slot_ms"] == run.slot_ms
                and line["attempt"] == run.attempt
            )
            if started is not None and run.lease_end_ms > run.started_ms + fleet.lease_ms:
                return run, inst
        time.sleep(0.01)
    raise RoundFailed(f"no live run with a renewed lease within {timeout:.0f} s")


def next_start(fleet: Fleet, run: Run, after_ns: int, timeout: float) -> Line:
    """The first handler start after ``after_ns`` of a later attempt of ``run``'s slot.

    A handler start of a newer slot counts too (a run crossing midnight UTC: the
    dead run was replaced by the next day's slot, docs/protocol.rst, "Why a newer run
    wins over a dead older one"); the round notes it.
    """
    return fleet.wait(
        lambda line: line["ev"] == "handler-start"
        and line["mono_ns"] > after_ns
        and (line["slot_ms"] > run.slot_ms or (line["slot_ms"] == run.slot_ms and line["attempt"] > run.attempt)),
        timeout,
        f"handler start after attempt {run.attempt}",
    )


def one_round(fleet: Fleet, store: Store, action: str, rng: random.Random) -> Sample:
    """Signal the runner of the live run (SIGKILL or SIGTERM), measure the takeover, restart the victim."""
    hb_s, lease_s = fleet.heartbeat_ms / 1000, fleet.lease_ms / 1000
    run, victim = live_run(fleet, store, timeout=lease_s + 10)
    time.sleep(rng.uniform(0, hb_s))  # anywhere between two heartbeats
    sample = Sample(action, victim.name, run.slot_ms, run.attempt)
    try:
        if action == "kill":
            sent = victim.send(signal.SIGKILL)
            victim.proc.wait(10)
            after = store.get_run(fleet.job, run.slot_ms)  # the victim is dead: its last renewal is final
            last_beat = (
                after.lease_end_ms - fleet.lease_ms
                if after is not None and after.token == run.token and after.status == "running"
                else None
            )
            started = next_start(fleet, run, sent, timeout=lease_s + 2 * hb_s + 10)
            if last_beat is not None and started["slot_ms"] == run.slot_ms:
                taken = store.get_run(fleet.job, run.slot_ms)
                if taken is not None and taken.attempt == started["attempt"]:
                    sample.inner_ms = float(taken.started_ms - last_beat)
        else:
            sent = victim.send(signal.SIGTERM)
            aborted = fleet.wait(
                lambda line: line["ev"] == "aborted"
                and line["runner"] == victim.name
                and line["attempt"] == run.attempt,
                timeout=5,
                what=f"abort of {victim.name}'s handler",
            )
            started = next_start(fleet, run, sent, timeout=lease_s + 2 * hb_s + 10)
            sample.inner_ms = (started["mono_ns"] - aborted["mono_ns"]) / 1e6
            if fleet.find(lambda line: line["ev"] == "handover" and line["runner"] == victim.name) is None:
                sample.note = "no handover event"
            try:
                code = victim.proc.wait(STOP_TIMEOUT_MS / 1000 + 5)
            except subprocess.TimeoutExpired:
                victim.proc.kill()
                victim.proc.wait(10)
                code = None
            if code != 0:
                sample.note = f"{sample.note}; exit {code}".lstrip("; ")
        sample.delay_ms = (started["mono_ns"] - sent) / 1e6
        sample.taker = started["runner"]
        sample.taker_slot_ms = started["slot_ms"]
        sample.taker_attempt = started["attempt"]
        sample.taker_reason = started.get("reason")
        if started["slot_ms"] != run.slot_ms:
            sample.note = f"{sample.note}; replaced by a new slot".lstrip("; ")
    except RoundFailed as exc:
        sample.note = str(exc)
    if victim.alive:  # a round that failed half-way: make room for the restart
        victim.proc.kill()
        victim.proc.wait(10)
    fresh = fleet.spawn(victim.index)
    fleet.wait_settled(fresh, timeout=30)
    return sample


def plan(kills: int, terms: int) -> List[str]:
    """The actions in an even mix: ``kills`` SIGKILLs and ``terms`` SIGTERMs, interleaved."""
    marks = [((i + 0.5) / kills, "kill") for i in range(kills)] + [((i + 0.5) / terms, "term") for i in range(terms)]
    return [action for _, action in sorted(marks)]


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def percentile(values: List[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def fmt(value: Optional[float], digits: int = 0) -> str:
    """A number, or ``-`` for none."""
    return "-" if value is None else f"{value:.{digits}f}"


def print_rounds(samples: List[Sample], bounds: Dict[str, float]) -> None:
    """One line per round: who was signalled, who took over, the delays and their ratio to the bound."""
    print(f"{'round':>5} {'signal':<7} {'victim':<7} {'att':>3}  {'taker':<7} {'att':>3} {'reason':<9}"
          f" {'delay ms':>8} {'x bound':>7} {'inner ms':>8} {'x bound':>7}  note")  # fmt: skip
    for n, s in enumerate(samples, 1):
        bound = bounds[s.action]
        print(
            f"{n:>5} {'SIGKILL' if s.action == 'kill' else 'SIGTERM':<7} {s.victim:<7} {s.attempt:>3}  "
            f"{s.taker or '-':<7} {fmt(s.taker_attempt):>3} {s.taker_reason or '-':<9}"
            f" {fmt(s.delay_ms):>8} {fmt(None if s.delay_ms is None else s.delay_ms / bound, 2):>7}"
            f" {fmt(s.inner_ms):>8} {fmt(None if s.inner_ms is None else s.inner_ms / bound, 2):>7}  {s.note}"
        )
    print("delay: the signal -> the next attempt's handler starts (monotonic clock)")
    print("inner: SIGKILL: the victim's last heartbeat -> the takeover claim (the store's clock);")
    print("       SIGTERM: the victim's handler aborted -> the next attempt's handler starts (monotonic)")


def summary_rows(samples: List[Sample], bounds: Dict[str, float]) -> List[Tuple[str, float, int, List[float]]]:
    """(label, bound, rounds, delays) for each figure."""
    kills = [s for s in samples if s.action == "kill"]
    terms = [s for s in samples if s.action == "term"]
    rows = []
    for label, group, get in (
        ("SIGKILL -> next attempt's handler", kills, lambda s: s.delay_ms),
        ("  last heartbeat -> takeover (store clock)", kills, lambda s: s.inner_ms),
        ("SIGTERM -> next attempt's handler", terms, lambda s: s.delay_ms),
        ("  victim's abort -> next handler", terms, lambda s: s.inner_ms),
    ):
        if group:
            values = [v for v in (get(s) for s in group) if v is not None]
            rows.append((label, bounds[group[0].action], len(group), values))
    return rows


def print_summary(samples: List[Sample], bounds: Dict[str, float]) -> bool:
    """p50/p99/max, their ratios to the bound and the share within it; True if every headline figure is 100 %."""
    print()
    print(f"{'figure (ms)':<43} {'bound':>6} {'n':>4} {'p50':>6} {'p99':>6} {'max':>6}"
          f" {'p50/b':>6} {'p99/b':>6} {'max/b':>6} {'within':>7}")  # fmt: skip
    all_met = True
    for label, bound, rounds, values in summary_rows(samples, bounds):
        within = sum(1 for v in values if v <= bound)
        share = 100.0 * within / rounds
        if values:
            p50, p99, top = percentile(values, 50), percentile(values, 99), max(values)
            figures = f"{p50:6.0f} {p99:6.0f} {top:6.0f} {p50 / bound:6.2f} {p99 / bound:6.2f} {top / bound:6.2f}"
        else:
            figures = " ".join(f"{'-':>6}" for _ in range(6))
        print(f"{label:<43} {bound:6.0f} {len(values):>4} {figures} {share:6.0f}%")
        if not label.startswith(" "):
            all_met = all_met and within == rounds
    missing = sum(1 for s in samples if s.delay_ms is None)
    if missing:
        print(f"{missing} round(s) without a takeover in time count as outside the bound")
    return all_met


# ---------------------------------------------------------------------------------------------
# Stores: a namespace of the benchmark's own, and cleaning up after it
# ---------------------------------------------------------------------------------------------


def url_options(url: str) -> Dict[str, str]:
    """The query options of a URL."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def with_option(url: str, key: str, value: str) -> str:
    """``url`` with the query option ``key=value`` added."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + [(key, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def bench_store(given: Optional[str], tmp: Path, job: str) -> Iterator[Tuple[str, Store, str]]:
    """(the URL the instances use, the benchmark's own store on it, a description); cleans up on exit."""
    if given is None:
        url = f"sqlite:///{tmp / 'failover.db'}"
        with closing_store(url) as store:
            yield url, store, "temporary SQLite file"
        return
    scheme = urlsplit(given).scheme.lower()
    if scheme == "memory":
        raise SystemExit("memory:// lives in one process; give a sqlite://, redis:// or postgresql:// URL")
    if scheme in ("redis", "rediss", "valkey", "valkeys"):
        with redis_store(given, job) as found:
            yield found
    elif scheme in ("postgresql", "postgres"):
        with postgres_store(given, job) as found:
            yield found
    elif scheme == "sqlite":
        with closing_store(given) as store:
            try:
                yield given, store, given
            finally:
                try:
                    delete_sqlite_rows(store, job)
                except sqlite3.Error as exc:
                    print(f"could not delete the runs of job {job!r} from {given}: {exc}", file=sys.stderr)
    else:
        with closing_store(given) as store:
            yield given, store, f"{given} (the job's runs are left in it)"


@contextmanager
def closing_store(url: str) -> Iterator[Store]:
    """``open_store(url)``, closed on exit."""
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def delete_sqlite_rows(store: Store, job: str) -> None:
    """Delete the runs of ``job`` from a SQLite store's file (a file the benchmark did not make)."""
    from leasecron.stores.sqlite import SQLiteStore

    backend = cast(SQLiteStore, store)
    path, table = backend.path, backend.table
    conn = sqlite3.connect(path, timeout=10)
    try:
        with conn:
            conn.execute(f"DELETE FROM {table} WHERE job = ?", (job,))
    finally:
        conn.close()


@contextmanager
def redis_store(url: str, job: str) -> Iterator[Tuple[str, Store, str]]:
    """A Redis/Valkey store on ``url`` (with a fresh prefix unless one is given); deletes the job's keys on exit."""
    from leasecron.stores.redis import RedisStore, job_keys

    own_prefix = "prefix" not in url_options(url)
    if own_prefix:
        url = with_option(url, "prefix", REDIS_PREFIX.format(pid=os.getpid()))
    with closing_store(url) as store:
        backend = cast(RedisStore, store)
        client, prefix = backend.client, backend.prefix
        keys = list(job_keys(prefix, job))
        if own_prefix and client.exists(f"{prefix}:jobs"):
            raise SystemExit(f"the key prefix {prefix} is in use (left by a killed run?); pass ?prefix=...")
        if client.exists(*keys):
            raise SystemExit(f"keys of job {job!r} exist under prefix {prefix}; not touching them")
        try:
            yield url, store, f"{url}, prefix {prefix}"
        finally:
            client.delete(*keys)
            client.srem(f"{prefix}:jobs", job)


def admin_dsn(url: str) -> str:
    """The libpq DSN of a PostgreSQL store URL: leasecron's own options removed."""
    parts = urlsplit(url)
    libpq = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k not in ("schema", "table", "max_connections", "timeout")]  # fmt: skip
    if not any(k == "connect_timeout" for k, _ in libpq):
        libpq.append(("connect_timeout", "5"))
    return urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(libpq, quote_via=quote), ""))


@contextmanager
def postgres_store(url: str, job: str) -> Iterator[Tuple[str, Store, str]]:
    """A PostgreSQL store in a schema of the benchmark's own (or the given one); cleans up on exit.

    Without ``schema=``: ``leasecron_failover_<pid>``, created here (an existing one
    is an error, never reused). With ``schema=``: that schema, created here if it
    does not exist. A schema created here is dropped at the end (``DROP SCHEMA …
    CASCADE``); in a schema that existed only the job's rows are deleted.
    """
    import psycopg2

    from leasecron.stores.postgres import PostgresStore

    options = url_options(url)
    if "schema" not in options:
        url = with_option(url, "schema", PG_SCHEMA.format(pid=os.getpid()))
    if "application_name" not in options:  # pg_stat_activity then says whose sessions these are
        url = with_option(url, "application_name", f"leasecron-failover-{os.getpid()}")
    with closing_store(url) as store:  # checks the schema and table names; connects on first use
        backend = cast(PostgresStore, store)
        schema, table = backend.schema, backend.table
        admin = psycopg2.connect(admin_dsn(url))
        admin.autocommit = True
        owned = False
        try:
            with admin.cursor() as cur:
                cur.execute("SELECT to_regnamespace(%s) IS NOT NULL", (schema,))
                row = cur.fetchone()
                exists = bool(row and row[0])
            if exists and "schema" not in options:
                raise SystemExit(f"schema {schema} exists (left by a killed run?); not touching it. Pass ?schema=...")
            if not exists:
                with admin.cursor() as cur:
                    cur.execute(f"CREATE SCHEMA {schema}")
                owned = True
            try:
                yield url, store, f"{url}, schema {schema}" + (" (created and dropped here)" if owned else "")
            finally:
                store.close()  # before the DROP: its pooled sessions go away
                if not owned:
                    with admin.cursor() as cur:
                        for name in (table, f"{table}_jobs"):
                            cur.execute(f"DELETE FROM {schema}.{name} WHERE job = %s", (job,))
        finally:
            try:
                if owned:
                    with admin.cursor() as cur:
                        cur.execute("SET lock_timeout = '10s'")
                        cur.execute(f"DROP SCHEMA {schema} CASCADE")
            except Exception as exc:  # noqa: BLE001 - say what is left behind
                print(f"could not drop schema {schema} ({exc}); drop it by hand: DROP SCHEMA {schema} CASCADE",
                      file=sys.stderr)  # fmt: skip
            finally:
                admin.close()


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so every ``finally`` (killing the children) runs."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main() -> int:
    """Run the rounds and print the delays."""
    if sys.argv[1:2] == ["--child"]:
        return child_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILL rounds (default 10)")
    parser.add_argument("--terms", type=int, default=10, help="SIGTERM rounds (default 10)")
    parser.add_argument("--instances", type=int, default=3, help="instance processes (default 3)")
    parser.add_argument("--lease-ms", type=int, default=1_000, help="lease (default 1000)")
    parser.add_argument("--heartbeat-ms", type=int, default=200, help="heartbeat interval (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the signal timing (default: random)")
    args = parser.parse_args()
    if args.instances < 2:
        parser.error("--instances must be at least 2 (a runner and a backup)")
    if args.kills < 0 or args.terms < 0 or args.kills + args.terms == 0:
        parser.error("--kills and --terms must not be negative, and not both 0")
    if not 0 < 2 * args.heartbeat_ms < args.lease_ms:
        parser.error("--heartbeat-ms must be positive and under half of --lease-ms")
    exit_on_sigterm()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    job = f"failover-{os.getpid()}-{time.time_ns() // 1_000_000}"
    bounds = {"kill": float(args.lease_ms + 2 * args.heartbeat_ms), "term": float(2 * args.heartbeat_ms)}
    samples: List[Sample] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="leasecron-failover-") as tmpdir:
        tmp = Path(tmpdir)
        with bench_store(args.store, tmp, job) as (url, store, where):
            try:  # fail fast on a store that cannot be used (the instances would retry for ever)
                store.unfinished(job)
            except leasecron.StoreError as exc:
                raise SystemExit(f"the store cannot be used: {exc}") from None
            print(f"leasecron {leasecron.__version__}, store {store.kind} ({where}), Python {sys.version.split()[0]}")
            print(f"{args.instances} instance processes, job {job!r}, lease {args.lease_ms} ms,"
                  f" heartbeat {args.heartbeat_ms} ms, seed {seed}")  # fmt: skip
            print(f"bounds: takeover lease + 2 x heartbeat = {bounds['kill']:.0f} ms,"
                  f" hand-over 2 x heartbeat = {bounds['term']:.0f} ms; delays on CLOCK_MONOTONIC"
                  f" (the store-clock figure on {store.kind}'s clock)")  # fmt: skip
            fleet = Fleet(url, job, tmp, args.lease_ms, args.heartbeat_ms, max_attempts=args.kills + 2)
            try:
                for index in range(1, args.instances + 1):
                    fleet.spawn(index)
                for inst in list(fleet.current.values()):
                    fleet.wait_settled(inst, timeout=30)
                print()
                for action in plan(args.kills, args.terms):
                    samples.append(one_round(fleet, store, action, rng))
                    if sys.stderr.isatty():
                        s = samples[-1]
                        sys.stderr.write(f"\r{len(samples)} rounds, last: {s.action} {fmt(s.delay_ms)} ms ")
                        sys.stderr.flush()
                if sys.stderr.isatty():
                    sys.stderr.write("\n")
            except RoundFailed as exc:
                print(f"stopped: {exc}\n{fleet.describe()}", file=sys.stderr)
            except KeyboardInterrupt:
                print("interrupted: the rounds so far follow", file=sys.stderr)
            finally:
                fleet.close()
    if not samples:
        return 1
    print_rounds(samples, bounds)
    met = print_summary(samples, bounds)
    print(f"target: 100 % within the bound for SIGKILL and SIGTERM: {'met' if met else 'MISSED'}"
          f" ({len(samples)} rounds in {time.monotonic() - began:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # during the set-up; the children are killed already
        sys.exit(130)
