"""The nemesis: a seeded thread that keeps hurting a cluster of worker instances.

Every 1–3 s (drawn from ``random.Random(seed)``) it picks one action among
those the backend supports and applies it:

* ``kill``: SIGKILL an instance; it is started again 0.5–2 s later
  (``start-instance``).
* ``stop``: SIGSTOP an instance for 0.5–10 × the lease, then ``cont``
  (SIGCONT).
* ``term``: SIGTERM an instance (a graceful stop that hands its runs over);
  once it exited it is started again 0.5–2 s later.
* ``store-restart``: Redis/Valkey are killed with SIGKILL and started again
  (their append-only file, fsynced on every write, keeps every acknowledged
  write); PostgreSQL is stopped in immediate mode (a crash: no checkpoint) and
  started again. SQLite has no server: a locker process takes the file's write
  lock (``BEGIN IMMEDIATE``), is frozen (SIGSTOP) 0.5–3 s, continued, and rolls
  back (``how: sqlite-lock``); or a writer process is SIGKILLed in the middle
  of a large transaction (``how: sqlite-writer-killed``). A replicated Redis or
  Valkey (a primary, two replicas, three Sentinels) gets failovers instead
  (:mod:`chaoslib.failover`): ``kill -9`` or a long SIGSTOP of the primary until
  the Sentinels promote a replica, or a replica frozen a while; each is logged
  once the topology settled again, as ``failover`` or ``replica-cut``. There
  the first action is a failover (``store_first``), so every run has one; a
  store fault waits until the store is ``ready`` for one.
* Through an instance's own proxy (proxied server stores only): ``stall`` 0.5–6 s, then
  ``unstall``; ``latency`` 50–300 ms for 2–5 s, then ``latency`` 0; ``reset``
  every connection.
* ``clock-step`` (Valkey under libfaketime, :class:`chaoslib.clock.SteppableClock`):
  the store's clock jumps 1–6 s forward or back, stays there 2–8 s, then jumps
  back (``clock-back``). A forward step ends live leases early (a backup takes
  over a runner that is alive; its next heartbeat is refused); a backward one
  keeps them alive longer and makes claims look early or less late.
* A partition (proxied server stores only): every proxy at once, for 2–5 s, either
  stalls (what was sent arrives when it ends: requests the clients gave up on
  still run) or drops everything (``blackhole``; the connections are reset when
  it ends). Logged as a ``stall`` and an ``unstall`` line with ``runner`` null,
  ``how: all`` and ``mode``. After a blackhole the instances' retries race:
  a newer slot's claim (a short backoff) usually beats the retries of an older
  slot's claim (a long one), which are then refused as ``late``. A partition is
  likelier while an instance is frozen, and a run that saw no blackhole by the
  middle of its faulty time gets one at its next action that allows a partition
  (a short run drawn without one proved no late claim).

At most ``instances - 2`` instances are down, frozen or stalled at once, and
an instance carries one fault at a time; kill, stop, term and stall go, 3
times in 4, to an instance that runs a handler right now (when one does), so
they hit live attempts. Every fault is healed by
``quiet_at`` (durations are cut short to end by then), so the run can settle.
Each action is written to ``nemesis.jsonl`` when it takes effect
(``{"ev": "nemesis", "action", "runner", "pid", "wall_ns", "mono_ns", ...}``)
and counted in :attr:`Nemesis.counts`: the time of a ``kill``, ``stop`` or
``term`` is taken right after the signal was sent (the process can do nothing
after it), that of a ``cont`` or ``unstall`` right before (the process may act
at once, before the nemesis could take a later stamp). A store restart is written once the
store is back, with the time of the crash and ``duration_ms`` (nothing else
is written meanwhile: the nemesis thread waits for it).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any, Callable, Dict, List, Optional, Protocol, Tuple

from .clock import SteppableClock
from .proxy import FaultyProxy

__all__ = ["Instance", "Nemesis", "NemesisLog", "ServerRestarter", "SQLiteFaults", "StoreFaults"]

log = logging.getLogger("chaoslib.nemesis")

#: How long an instance may take to exit after SIGTERM before it is killed.
TERM_TIMEOUT_S = 20.0
#: Poll interval while waiting for an instance to exit.
EXIT_POLL_S = 0.05
#: How often an instance fault goes to an instance that runs a handler, when there is one.
BUSY_BIAS = 0.75
#: How long a SQLite helper may take to get the write lock (its busy timeout is 1.5 s: an instance
#: frozen inside a write holds the lock) before the fault is skipped.
HELPER_TIMEOUT_S = 4.0


class Instance(Protocol):
    """One worker instance, as the nemesis sees it (the harness implements it)."""

    runner: str
    proxy: Optional[FaultyProxy]

    @property
    def pid(self) -> Optional[int]:
        """The current process's id (None before the first start)."""

    def alive(self) -> bool:
        """Whether the current process has not exited."""

    def send(self, signum: int) -> None:
        """Send ``signum`` to the current process."""

    def reap(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the current process to exit; whether it did."""

    def launch(self) -> int:
        """Start a new incarnation (the previous one has exited); its pid."""

    def busy(self) -> bool:
        """Whether the current process runs a handler right now (as far as its log shows)."""

    def ready(self) -> bool:
        """Whether the current process started its LeaseCron (logged ``running``)."""


class NemesisLog:
    """``nemesis.jsonl``: one JSON line per action, flushed at once, thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(
        self,
        action: str,
        runner: Optional[str] = None,
        pid: Optional[int] = None,
        *,
        at: Optional[Tuple[int, int]] = None,
        **extra: Any,
    ) -> Dict[str, Any]:
        """Append one action; ``at`` is (wall_ns, mono_ns) when it took effect (default: now)."""
        wall_ns, mono_ns = at if at is not None else (time.time_ns(), time.monotonic_ns())
        line = {"ev": "nemesis", "action": action, "runner": runner, "pid": pid,
                "wall_ns": wall_ns, "mono_ns": mono_ns, **extra}  # fmt: skip
        with self._lock:
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()
        return line

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._file.close()


def _now_stamp() -> Tuple[int, int]:
    """(wall_ns, mono_ns) of now."""
    return time.time_ns(), time.monotonic_ns()


class StoreFaults(Protocol):
    """What the nemesis can do to the store itself."""

    #: Whether the faults must wait until no instance is frozen.
    needs_unfrozen_instances: bool
    #: The weight of a store fault among the nemesis's choices (kill and stop weigh 3).
    weight: float

    def hows(self) -> List[str]:
        """The kinds of store fault this backend supports (each a ``how``)."""

    def ready(self, budget_s: float) -> bool:
        """Whether a store fault may begin now, ``budget_s`` before the quiet end."""

    def apply(self, how: str, rng: random.Random, budget_s: float, nemesis: "Nemesis") -> None:
        """Apply one fault of kind ``how`` (logging it through ``nemesis``); heal it within ``budget_s``."""

    def heal(self) -> None:
        """End every fault still in effect (on stop)."""


class ServerRestarter:
    """Crash and restart a store server: Redis/Valkey (SIGKILL) or PostgreSQL (immediate stop).

    ``server`` is a :class:`tests.servers.Server` or :class:`tests.pg_servers.PgServer`;
    ``how`` says which crash is used (``kill-9`` or ``immediate``).
    """

    needs_unfrozen_instances = False
    weight = 1.0

    def __init__(self, server: Any, how: str) -> None:
        self.server = server
        self.how = how

    def hows(self) -> List[str]:
        """The one crash this server gets: ``kill-9`` or ``immediate``."""
        return [self.how]

    def ready(self, budget_s: float) -> bool:
        """Always: a restart is over before the nemesis acts again."""
        return True

    def apply(self, how: str, rng: random.Random, budget_s: float, nemesis: "Nemesis") -> None:
        """Crash the server and start it again; logged with the time of the crash and the downtime."""
        at = _now_stamp()
        if self.how == "immediate":
            self.server.restart(immediate=True)
        else:
            self.server.restart()
        duration_ms = (time.monotonic_ns() - at[1]) // 1_000_000
        nemesis.record("store-restart", at=at, how=self.how, duration_ms=duration_ms)

    def heal(self) -> None:
        """Start the server again if a restart left it down."""
        if not self.server.running:
            self.server.start()


_LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=1.5, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
"""

_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=1.5, isolation_level=None)
conn.execute("CREATE TABLE IF NOT EXISTS chaos_scratch (id INTEGER PRIMARY KEY, pad BLOB)")
conn.execute("BEGIN IMMEDIATE")
conn.executemany("INSERT INTO chaos_scratch (pad) VALUES (randomblob(4096))", [()] * 2000)
print("writing", flush=True)
sys.stdin.readline()
"""


class SQLiteFaults:
    """SQLite's stand-ins for a store crash: a frozen lock holder, and a writer killed mid-transaction.

    A helper that cannot get the write lock within its busy timeout (an
    instance is frozen inside a write, holding it) gives up, and the fault is
    skipped (counted as ``store-restart-skipped``).
    """

    needs_unfrozen_instances = False
    #: SQLite has no proxy faults: its store faults come more often.
    weight = 2.5

    def __init__(self, db_path: Path) -> None:
        self.db_path = Path(db_path)
        self._locker: Optional["subprocess.Popen[str]"] = None

    def hows(self) -> List[str]:
        """A frozen lock holder, or a writer killed mid-transaction."""
        return ["sqlite-lock", "sqlite-writer-killed"]

    def ready(self, budget_s: float) -> bool:
        """Always: a second lock holder waits for the first (and is skipped if it cannot get the lock)."""
        return True

    def _spawn(self, script: str, ready: str) -> "subprocess.Popen[str]":
        """Start a helper process on the database and wait until it printed ``ready`` (RuntimeError if not)."""
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(self.db_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        deadline = time.monotonic() + HELPER_TIMEOUT_S
        while time.monotonic() < deadline:
            readable, _, _ = select.select([proc.stdout], [], [], 0.1)
            if readable:
                line = proc.stdout.readline()
                if line.strip() == ready:
                    return proc
                break  # EOF or garbage: it failed
            if proc.poll() is not None:
                break
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        raise RuntimeError(f"SQLite helper process did not say {ready!r} (exit {proc.returncode})")

    def apply(self, how: str, rng: random.Random, budget_s: float, nemesis: "Nemesis") -> None:
        """Apply one SQLite fault; skipped (and counted) when its helper cannot get the write lock."""
        try:
            self._apply(how, rng, budget_s, nemesis)
        except RuntimeError as exc:
            log.info("nemesis: %s skipped: %s", how, exc)
            nemesis.counts["store-restart-skipped"] += 1

    def _apply(self, how: str, rng: random.Random, budget_s: float, nemesis: "Nemesis") -> None:
        """Kill a writer mid-transaction, or freeze a lock holder and schedule its release."""
        if how == "sqlite-writer-killed":
            proc = self._spawn(_WRITER, "writing")
            proc.kill()
            nemesis.record("store-restart", pid=proc.pid, how=how)
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            return
        duration = min(rng.uniform(0.5, 3.0), budget_s)
        proc = self._spawn(_LOCKER, "locked")
        proc.send_signal(signal.SIGSTOP)
        self._locker = proc
        nemesis.record("store-restart", pid=proc.pid, how=how, duration_ms=int(duration * 1000))
        nemesis.schedule(duration, self._release)

    def _release(self) -> None:
        """Continue the frozen lock holder and let it roll back and exit."""
        proc, self._locker = self._locker, None
        if proc is None:
            return
        proc.send_signal(signal.SIGCONT)
        try:
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def heal(self) -> None:
        """Release a lock holder still frozen."""
        self._release()


class Nemesis(threading.Thread):
    """The seeded fault injector (see the module docstring). ``start()``, then ``stop()`` or let it end."""

    def __init__(
        self,
        instances: List[Instance],
        store: StoreFaults,
        *,
        seed: int,
        lease_ms: int,
        log_path: Path,
        quiet_at: float,
        proxies: bool,
        clock: Optional["SteppableClock"] = None,
        store_first: bool = False,
    ) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.instances = {inst.runner: inst for inst in instances}
        self.store = store
        self.rng = random.Random(seed)
        self.lease_s = lease_ms / 1000.0
        self.log = NemesisLog(log_path)
        self.quiet_at = quiet_at
        self.proxies = proxies
        #: The store's clock, if it can be stepped.
        self.clock = clock
        self.max_down = max(0, len(instances) - 2)
        #: Actions applied so far, by name (store restarts also by ``how``).
        self.counts: Counter[str] = Counter()
        #: runner -> the fault it carries now (kill, stop, term, stall, latency).
        self.faults: Dict[str, str] = {}
        self.error: Optional[BaseException] = None
        #: Whether every proxy is stalled (a store-wide partition).
        self.partitioned = False
        #: The steps that failed (and were skipped), as text.
        self.failures: List[str] = []
        #: Whether the first action is a store fault (when the store is ready for one).
        self._store_next = store_first
        #: When a store-wide blackhole must have happened (proxied stores): set when the loop starts.
        self._blackhole_by = float("inf")
        self._halt = threading.Event()
        self._pending: List[Tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    # -- used by the store faults and the harness ----------------------------------------

    def record(self, action: str, runner: Optional[str] = None, pid: Optional[int] = None, **extra: Any) -> None:
        """Log one action to nemesis.jsonl and count it."""
        self.log.write(action, runner, pid, **extra)
        self.counts["latency-end" if action == "latency" and extra.get("ms") == 0 else action] += 1
        if "how" in extra:
            self.counts[f"{action}:{extra['how']}"] += 1

    def schedule(self, delay_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` in the nemesis thread ``delay_s`` from now."""
        heapq.heappush(self._pending, (time.monotonic() + delay_s, next(self._seq), action))

    def stop(self, timeout: float = 30.0) -> None:
        """Stop picking actions, heal every fault in effect, and wait for the thread."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        """The nemesis thread: run due heal steps, pick an action every 1–3 s until ``quiet_at``, heal at the end."""
        try:
            start = time.monotonic()
            next_action = start + self.rng.uniform(1.0, 3.0)
            self._blackhole_by = start + (self.quiet_at - start) / 2
            while not self._halt.is_set():
                now = time.monotonic()
                while self._pending and self._pending[0][0] <= now:
                    _, _, action = heapq.heappop(self._pending)
                    self._guarded("a scheduled step", action)
                if now >= self.quiet_at and not self._pending:
                    return
                if next_action <= now < self.quiet_at:
                    self._guarded("an action", lambda now=now: self._act(now))
                    next_action = time.monotonic() + self.rng.uniform(1.0, 3.0)
                wake = min([p[0] for p in self._pending[:1]] + [next_action if now < self.quiet_at else self.quiet_at])
                self._halt.wait(max(0.0, min(wake - time.monotonic(), 0.5)))
        except BaseException as exc:  # noqa: BLE001 - reported by the harness
            self.error = exc
            log.exception("nemesis failed")
        finally:
            self._heal()
            self.log.close()

    def _guarded(self, what: str, step: Callable[[], None]) -> None:
        """Run ``step``; a failure (say, a helper that never got the SQLite lock) is logged and counted, not fatal."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - one failed fault must not end the run
            log.warning("nemesis: %s failed: %r", what, exc)
            self.counts["failed-steps"] += 1
            self.failures.append(repr(exc))

    def _act(self, now: float) -> None:
        """Pick one action the backend and the quorum allow, and apply it."""
        budget = self.quiet_at - now
        free = [r for r in sorted(self.instances) if r not in self.faults]
        down = sum(1 for f in self.faults.values() if f != "latency")
        can_down = down < self.max_down and bool(free)
        frozen = any(f == "stop" for f in self.faults.values())
        choices: List[Tuple[str, float]] = []
        store_ready = not (frozen and self.store.needs_unfrozen_instances) and self.store.ready(budget)
        if store_ready:
            choices.append(("store-restart", self.store.weight))
        if can_down:
            choices += [("kill", 3.0), ("stop", 3.0)]
            if budget > TERM_TIMEOUT_S / 2:
                choices.append(("term", 2.0))
            if self.proxies and not self.partitioned:
                choices.append(("stall", 2.0))
        if self.proxies and free and not self.partitioned:
            choices += [("latency", 1.5), ("reset", 1.5)]
        if self.proxies and not self.partitioned and not any(f in ("stall", "latency") for f in self.faults.values()):
            choices.append(("partition", 2.0 if any(f == "stop" for f in self.faults.values()) else 0.5))
        if self.clock is not None and self.clock.offset_ms == 0 and budget > 4.0:
            choices.append(("clock-step", 1.0))
        if not choices:
            return
        first, self._store_next = self._store_next and store_ready, False
        names = [c[0] for c in choices]
        action = "store-restart" if first else self.rng.choices(names, weights=[c[1] for c in choices])[0]
        if not first and "partition" in names and now >= self._blackhole_by and not self.counts["partition:blackhole"]:
            self._partition(budget, "blackhole")  # every proxied run sees one: its retries race (late claims)
            return
        if action == "store-restart":
            how = self.rng.choice(self.store.hows())
            self.store.apply(how, self.rng, budget, self)
            return
        if action == "partition":
            self._partition(budget)
            return
        if action == "clock-step":
            self._clock_step(budget)
            return
        if action == "term":  # a hand-over needs a started instance: SIGTERM before that kills it
            free = [r for r in free if self.instances[r].ready()]
            if not free:
                return
        busy = [r for r in free if self.instances[r].busy()]
        pick_busy = self.rng.random() < BUSY_BIAS
        runner = self.rng.choice(busy if busy and pick_busy else free) if free else None
        assert runner is not None
        apply = {
            "kill": self._kill, "stop": self._freeze, "term": self._term,
            "stall": self._stall, "latency": self._latency, "reset": self._reset,
        }[action]  # fmt: skip
        apply(self.instances[runner], budget)

    def _kill(self, inst: Instance, budget: float) -> None:
        """SIGKILL the instance; start it again 0.5–2 s later."""
        pid = inst.pid
        inst.send(signal.SIGKILL)
        self.record("kill", inst.runner, pid)
        self.faults[inst.runner] = "kill"
        inst.reap(10.0)
        self.schedule(self.rng.uniform(0.5, 2.0), lambda: self._restart(inst))

    def _restart(self, inst: Instance) -> None:
        """Start a new incarnation of a killed or terminated instance."""
        pid = inst.launch()
        self.record("start-instance", inst.runner, pid)
        self.faults.pop(inst.runner, None)

    def _freeze(self, inst: Instance, budget: float) -> None:
        """SIGSTOP the instance for 0.5–10 leases (cut to the budget), then SIGCONT."""
        duration = min(self.rng.uniform(0.5, 10.0) * self.lease_s, budget)
        pid = inst.pid
        inst.send(signal.SIGSTOP)
        self.record("stop", inst.runner, pid, duration_ms=int(duration * 1000))
        self.faults[inst.runner] = "stop"

        def cont() -> None:
            at = _now_stamp()  # before the signal: the process may act before a later stamp
            inst.send(signal.SIGCONT)
            self.record("cont", inst.runner, pid, at=at)
            self.faults.pop(inst.runner, None)

        self.schedule(duration, cont)

    def _term(self, inst: Instance, budget: float) -> None:
        """SIGTERM the instance (hand-over); once it exited (SIGKILL after 20 s), start it again 0.5–2 s later."""
        pid = inst.pid
        inst.send(signal.SIGTERM)
        self.record("term", inst.runner, pid)
        self.faults[inst.runner] = "term"
        deadline = time.monotonic() + TERM_TIMEOUT_S

        def check() -> None:
            if inst.alive() and time.monotonic() < deadline:
                self.schedule(EXIT_POLL_S, check)
                return
            if inst.alive():
                inst.send(signal.SIGKILL)
                self.record("kill", inst.runner, pid, reason="no exit after SIGTERM")
                inst.reap(10.0)
            self.schedule(self.rng.uniform(0.5, 2.0), lambda: self._restart(inst))

        self.schedule(EXIT_POLL_S, check)

    def _stall(self, inst: Instance, budget: float) -> None:
        """Stall the instance's proxy for 0.5–6 s."""
        assert inst.proxy is not None
        proxy = inst.proxy
        duration = min(self.rng.uniform(0.5, 6.0), budget)
        proxy.stall()
        self.record("stall", inst.runner, inst.pid, duration_ms=int(duration * 1000))
        self.faults[inst.runner] = "stall"

        def unstall() -> None:
            at = _now_stamp()
            proxy.unstall()
            self.record("unstall", inst.runner, inst.pid, at=at)
            self.faults.pop(inst.runner, None)

        self.schedule(duration, unstall)

    def _latency(self, inst: Instance, budget: float) -> None:
        """Delay every chunk of the instance's proxy by 50–300 ms for 2–5 s."""
        assert inst.proxy is not None
        proxy = inst.proxy
        ms = self.rng.randint(50, 300)
        duration = min(self.rng.uniform(2.0, 5.0), budget)
        proxy.set_latency(ms)
        self.record("latency", inst.runner, inst.pid, ms=ms, duration_ms=int(duration * 1000))
        self.faults[inst.runner] = "latency"

        def end() -> None:
            proxy.set_latency(0)
            self.record("latency", inst.runner, inst.pid, ms=0, duration_ms=0)
            self.faults.pop(inst.runner, None)

        self.schedule(duration, end)

    def _partition(self, budget: float, mode: Optional[str] = None) -> None:
        """Cut every instance off the store at once for 2–5 s: every proxy stalls, or drops (blackhole)."""
        proxies = [inst.proxy for inst in self.instances.values() if inst.proxy is not None]
        duration = min(self.rng.uniform(2.0, 5.0), budget)
        mode = mode or self.rng.choice(["stall", "blackhole"])
        for proxy in proxies:
            if mode == "blackhole":
                proxy.blackhole()
            else:
                proxy.stall()
        self.record("stall", None, None, how="all", mode=mode, duration_ms=int(duration * 1000))
        self.counts[f"partition:{mode}"] += 1
        self.partitioned = True

        def heal() -> None:
            at = _now_stamp()
            for proxy in proxies:
                proxy.unstall()
            self.record("unstall", None, None, at=at, how="all")
            self.partitioned = False

        self.schedule(duration, heal)

    def _clock_step(self, budget: float) -> None:
        """Step the store's clock 1–6 s forward or back; step it back 2–8 s later."""
        clock = self.clock
        assert clock is not None
        offset_ms = self.rng.choice([-1, 1]) * self.rng.randint(1, 6) * 1000
        duration = min(self.rng.uniform(2.0, 8.0), budget - 1.0)
        at = _now_stamp()
        clock.step(offset_ms)
        self.record("clock-step", None, None, at=at, offset_ms=offset_ms, duration_ms=int(duration * 1000))

        def back() -> None:
            self._clock_back()

        self.schedule(duration, back)

    def _clock_back(self) -> None:
        assert self.clock is not None
        at = _now_stamp()
        self.clock.step(0)
        self.record("clock-back", None, None, at=at, offset_ms=0)

    def _reset(self, inst: Instance, budget: float) -> None:
        """Reset every connection of the instance's proxy."""
        assert inst.proxy is not None
        count = inst.proxy.reset_all()
        self.record("reset", inst.runner, inst.pid, connections=count)

    def _heal(self) -> None:
        """End every fault in effect: continue frozen instances, clear proxies, release the store.

        Killed or terminated instances are not started again: the harness is stopping.
        """
        for runner, fault in sorted(self.faults.items()):
            inst = self.instances[runner]
            try:
                if fault == "stop":
                    at = _now_stamp()
                    inst.send(signal.SIGCONT)
                    self.record("cont", runner, inst.pid, at=at)
                elif fault == "stall" and inst.proxy is not None:
                    inst.proxy.unstall()
                    self.record("unstall", runner, inst.pid)
                elif fault == "latency" and inst.proxy is not None:
                    inst.proxy.set_latency(0)
                    self.record("latency", runner, inst.pid, ms=0, duration_ms=0)
            except (OSError, RuntimeError) as exc:
                log.warning("healing %s of %s failed: %s", fault, runner, exc)
        if self.partitioned:
            for inst in self.instances.values():
                if inst.proxy is not None:
                    inst.proxy.unstall()
            self.record("unstall", None, None, how="all")
            self.partitioned = False
        self._pending.clear()
        if self.clock is not None and self.clock.offset_ms != 0:
            self._clock_back()
        try:
            self.store.heal()
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            log.warning("healing the store failed: %s", exc)
