"""The demo's worker processes: each a ``python -m leasecron.cli.worker`` with the plan's options,
started, read, signalled and, at the end, made sure to be gone.

A thread per worker reads its JSON event lines onto one queue, as ``(worker, event)``, and
ends with an ``exit`` event carrying the exit code. The store's URL reaches a worker in its
environment (``LEASECRON_STORE``), never in its arguments, which any user of the host can read.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from .demo_plan import WORKER_OPTIONS, now_ms

__all__ = ["Worker", "WorkerProcesses", "stderr_tail"]


@dataclass
class Worker:
    """One worker process: its name, the process, where its stderr goes, and what the demo did to it."""

    name: str
    proc: "subprocess.Popen[str]"
    stderr_path: str
    fate: str = ""  # "" (serving), "killed", "terminated" or "stopping"
    exited: bool = False


class WorkerProcesses:
    """Every worker the demo started (``started``, in order); their events are put on ``events``
    as ``(worker, event)``."""

    def __init__(
        self, url: str, workdir: str, history_size: int, events: queue.Queue[Tuple[Worker, Dict[str, Any]]]
    ) -> None:
        self.url = url
        self.workdir = workdir
        self.history_size = history_size
        self.events = events
        self.started: List[Worker] = []

    def spawn(self) -> Worker:
        """Start the next worker, ``worker-N``, and the thread that reads its events."""
        name = f"worker-{len(self.started) + 1}"
        stderr_path = os.path.join(self.workdir, f"{name}.stderr")
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        env["LEASECRON_STORE"] = self.url  # not in the arguments: any user of the host can read those
        history = str(self.history_size)
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leasecron.cli.worker", "--runner", name]
                + WORKER_OPTIONS + ["--history-size", history],
                stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1, env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches the demo only; it stops them
            )  # fmt: skip
        worker = Worker(name, proc, stderr_path)
        self.started.append(worker)
        threading.Thread(target=self._read, args=(worker,), name=f"demo-read-{name}", daemon=True).start()
        return worker

    def _read(self, worker: Worker) -> None:
        assert worker.proc.stdout is not None
        for line in worker.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "output", "text": line.rstrip(), "t": now_ms()}
            self.events.put((worker, event))
        code = worker.proc.wait()
        self.events.put((worker, {"event": "exit", "code": code, "t": now_ms()}))

    def signal(self, worker: Worker, signum: int, fate: str) -> int:
        """Send ``signum`` to ``worker``, marked with ``fate``; the time read just before it."""
        worker.fate = fate
        sent = now_ms()  # read before the signal: whatever the signal causes happens after it
        try:
            os.kill(worker.proc.pid, signum)
        except ProcessLookupError:
            pass
        return sent

    def alive(self) -> List[Worker]:
        """The workers whose exit has not been read yet."""
        return [w for w in self.started if not w.exited]

    def end(self) -> None:
        """Leave no worker behind: terminate each still running, and kill one not gone within 10 s."""
        for worker in self.alive():
            if worker.proc.poll() is None:
                worker.proc.terminate()
        for worker in self.started:
            try:
                worker.proc.wait(10)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()


def stderr_tail(worker: Worker) -> str:
    """The last five lines of the worker's stderr, each on a new line under the event lines' ``|``."""
    try:
        with open(worker.stderr_path) as f:
            tail = f.read().strip().splitlines()[-5:]
    except OSError:
        return ""
    return "".join(f"\n{'':<41}| {line}" for line in tail)
