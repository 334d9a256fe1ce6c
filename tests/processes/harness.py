"""Start real worker processes and follow the JSON lines they print.

A :class:`Cluster` starts ``python -m leasecron.cli.worker`` processes on one
store URL. A background thread per process reads its stdout; every JSON line
(plus a synthetic ``eof`` line when the process closes stdout) lands in one
shared list, in the order the lines were read, under a condition variable.
:meth:`Cluster.wait_event` waits, with a deadline, for an event that matches a
predicate; it looks at every event seen so far, so an event that came before
the call is never missed. :meth:`Cluster.close` kills every process that is
still alive (also a stopped one) and is called in teardown even on failure.

Each process's stderr (the ``leasecron`` log's warnings, tracebacks) goes to
a file beside the test's database; a timeout's failure message quotes the
events and the tail of every stderr file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from leasecron import Run, Store
from tests.helpers import line_reader, reap, wait_for

__all__ = [
    "Cluster",
    "Worker",
    "WorkerCrashed",
    "Event",
    "first_run",
    "now_ms",
    "ready_t",
    "renewed_run",
    "store_write_lock",
]

Event = Dict[str, Any]
Predicate = Callable[[Event], bool]


class WorkerCrashed(AssertionError):
    """A worker that should have exited cleanly did not (its exit code and stderr say how)."""


def now_ms() -> int:
    """The wall clock in epoch ms, as the workers stamp their lines (``t``)."""
    return time.time_ns() // 1_000_000


class Worker:
    """One worker process."""

    def __init__(self, cluster: "Cluster", runner: str, proc: "subprocess.Popen[bytes]", stderr_path: Path) -> None:
        self.cluster = cluster
        self.runner = runner
        self.proc = proc
        self.stderr_path = stderr_path
        assert proc.stdout is not None
        self.reader = line_reader(proc.stdout, self._add, name=f"reader-{runner}", at_end=self._ended)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _add(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        try:
            event = json.loads(text)
        except ValueError:
            event = {"event": "raw", "line": text}
        if not isinstance(event, dict):
            event = {"event": "raw", "line": text}
        event.setdefault("runner", self.runner)
        event["_seen"] = now_ms()
        self.cluster._append(event)

    def _ended(self) -> None:
        self.cluster._append({"event": "eof", "runner": self.runner, "pid": self.pid, "_seen": now_ms()})

    def send(self, signum: int) -> int:
        """Send a signal; returns the wall clock (epoch ms) right after it was sent."""
        os.kill(self.proc.pid, signum)
        return now_ms()

    def kill(self) -> int:
        """SIGKILL; returns the wall clock right after it was sent."""
        return self.send(signal.SIGKILL)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit; its exit code."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.runner} did not exit within {timeout} s\n{self.cluster.describe()}")

    def assert_clean_exit(self, timeout: float) -> None:
        """Wait for the process to exit; raise :class:`WorkerCrashed` unless its exit code is 0."""
        code = self.wait_exit(timeout)
        if code != 0:
            raise WorkerCrashed(f"worker {self.runner} exited with {code}\n{self.stderr_tail()}")

    def stderr_tail(self, chars: int = 3_000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@contextmanager
def store_write_lock(backend: Any) -> Iterator[None]:
    """Hold back every write to the store from this process while the block runs.

    Every write of the workers (claims, heartbeats, finishes) waits in the
    store (SQLite's busy handler, a paused Redis) until the block ends.
    """
    blocker = backend.write_blocker()
    try:
        blocker.take()
        yield
    finally:
        blocker.close()


class Cluster:
    """Worker processes sharing one store, and the events they print."""

    def __init__(self, url: str, tmp_path: Path, job: str = "pjob") -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.job = job
        self.workers: Dict[str, Worker] = {}
        self.events: List[Event] = []
        self._cond = threading.Condition()

    # -- processes ---------------------------------------------------------------

    def start(
        self,
        runner: str,
        *,
        every: float,
        work: float,
        lease_ms: int,
        heartbeat_ms: int,
        jitter_ms: int = 0,
        catch_up_ms: int = 0,
        overlap: str = "skip",
        stop_timeout_ms: int = 5_000,
        poll_ms: int = 1_000,
        ignore_abort: bool = False,
        probe_finish: bool = False,
        job: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        retries: int = 0,
        retry_delay_ms: int = 1_000,
        fail_tries: int = 0,
        lease_margin_ms: Optional[int] = None,
        url: Optional[str] = None,
    ) -> Worker:
        """Start one worker process (it prints ``ready`` once started); ``job`` defaults to the cluster's,
        ``url`` to the cluster's store URL (another way to the same store: a proxy)."""
        assert runner not in self.workers, runner
        cmd = [
            sys.executable,
            "-m",
            "leasecron.cli.worker",
            "--store", url or self.url,
            "--runner", runner,
            "--job", job or self.job,
            "--every", repr(every),
            "--work", repr(work),
            "--lease-ms", str(lease_ms),
            "--heartbeat-ms", str(heartbeat_ms),
            "--jitter-ms", str(jitter_ms),
            "--catch-up-ms", str(catch_up_ms),
            "--overlap", overlap,
            "--stop-timeout-ms", str(stop_timeout_ms),
            "--poll-ms", str(poll_ms),
            "--retries", str(retries),
            "--retry-delay-ms", str(retry_delay_ms),
            "--fail-tries", str(fail_tries),
        ]  # fmt: skip
        if timeout_ms is not None:
            cmd += ["--timeout-ms", str(timeout_ms)]
        if lease_margin_ms is not None:
            cmd += ["--lease-margin-ms", str(lease_margin_ms)]
        if ignore_abort:
            cmd.append("--ignore-abort")
        if probe_finish:
            cmd.append("--probe-finish")
        stderr_path = self.tmp_path / f"{runner}.stderr"
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env)
        worker = Worker(self, runner, proc, stderr_path)
        self.workers[runner] = worker
        worker.reader.start()
        return worker

    def start_many(self, names: List[str], **options: Any) -> List[Worker]:
        """Start several workers and wait until every one printed ``ready``; returns them."""
        workers = [self.start(name, **options) for name in names]
        for name in names:
            self.wait_event(lambda e, n=name: e["event"] == "ready" and e["runner"] == n, timeout=15)
        return workers

    def close(self) -> None:
        """Kill every process still alive (stopped ones too) and reap it."""
        for worker in self.workers.values():
            if worker.proc.poll() is None:
                try:
                    worker.proc.kill()
                except ProcessLookupError:
                    pass
        for worker in self.workers.values():
            reap(worker.proc, worker.reader)

    # -- events ----------------------------------------------------------------------

    def _append(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def snapshot(self) -> List[Event]:
        """The events so far (a copy)."""
        with self._cond:
            return list(self.events)

    def where(self, predicate: Optional[Predicate] = None, **fields: Any) -> List[Event]:
        """The events so far whose fields equal ``fields`` and that match ``predicate``."""
        return [
            e
            for e in self.snapshot()
            if all(e.get(k) == v for k, v in fields.items()) and (predicate is None or predicate(e))
        ]

    def wait_event(self, predicate: Predicate, timeout: float, message: str = "") -> Event:
        """The first event (of all seen, old or new) matching ``predicate``; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            index = 0
            while True:
                while index < len(self.events):
                    event = self.events[index]
                    index += 1
                    if predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        pytest.fail(f"no matching event within {timeout} s {message}\n{self.describe()}")

    def wait_for(self, **fields: Any) -> Event:
        """:meth:`wait_event` for an event whose fields equal ``fields`` (``timeout`` given among them)."""
        timeout = fields.pop("timeout")
        return self.wait_event(lambda e: all(e.get(k) == v for k, v in fields.items()), timeout, repr(fields))

    def describe(self) -> str:
        """The events and every worker's stderr tail, for a failure message."""
        lines = ["events:"]
        for e in self.snapshot():
            shown = {k: v for k, v in e.items() if k not in ("pid", "job", "_seen")}
            lines.append(f"  {shown}")
        for worker in self.workers.values():
            tail = worker.stderr_tail()
            if tail:
                lines.append(f"stderr of {worker.runner} (exit {worker.proc.poll()}):\n{tail}")
        return "\n".join(lines)


def ready_t(cluster: Cluster) -> int:
    """The wall time (epoch ms) by which every worker had printed ``ready``."""
    readies = cluster.where(event="ready")
    assert len(readies) == len(cluster.workers), readies
    return max(e["t"] for e in readies)


def first_run(cluster: Cluster, every_s: float) -> Event:
    """The first ``handler-start`` of a slot due after every worker was ready (all of them claimed it)."""
    ready = ready_t(cluster)
    return cluster.wait_event(
        lambda e: e["event"] == "handler-start" and e["slot_ms"] > ready and e["attempt"] == 1,
        timeout=every_s + 5,
        message="(the first slot after all workers were ready)",
    )


def renewed_run(store: Store, job: str, slot_ms: int, lease_ms: int) -> Run:
    """Wait until a heartbeat renewed the run's lease (its runner is alive mid-run); the run."""

    def renewed() -> Optional[Run]:
        run = store.get_run(job, slot_ms)
        return run if run is not None and run.lease_end_ms > run.started_ms + lease_ms else None

    return wait_for(renewed, timeout=3, interval=0.005, message=f"no heartbeat renewed the lease of slot {slot_ms}")
