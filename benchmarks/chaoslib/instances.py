"""One worker instance of a chaos run, as the harness and the nemesis handle it.

A :class:`WorkerProcess` is a runner name (``i1``, ``i2``, …) whose process
(``python -m chaoslib.worker``, in a session of its own) may be killed and
started again: each start is an *incarnation* with a pid of its own, all
appending to the same log. It knows whether its process runs a handler right
now (from the log), and which of its ends were not asked for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from .proxy import FaultyProxy

__all__ = ["WorkerProcess"]

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


class WorkerProcess:
    """One instance: a runner name whose process may be killed and started again (incarnations)."""

    def __init__(
        self,
        runner: str,
        url: str,
        workdir: Path,
        log_dir: Path,
        args: List[str],
        seed: int,
        proxy: Optional[FaultyProxy] = None,
        skew: Optional[Tuple[int, Dict[str, str]]] = None,
    ) -> None:
        self.runner = runner
        #: (ms, libfaketime environment) of a skewed wall clock, or None.
        self.skew = skew
        self.url = url
        self.proxy = proxy
        self.log_path = log_dir / f"{runner}.jsonl"
        self.sink_path = workdir / "sink.db"  # shared by every instance
        self.stderr_path = workdir / "stderr" / f"{runner}.stderr"
        self.args = args
        self.seed = seed
        self.incarnations = 0
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        #: The last signal the harness or nemesis sent to the current process (SIGKILL/SIGTERM end it on purpose).
        self.signalled: Optional[int] = None
        #: (pid, exit code, signal sent) of every incarnation that ended without being told to.
        self.unexpected: List[Tuple[int, Optional[int], Optional[int]]] = []
        self.exits: List[Tuple[int, Optional[int]]] = []
        self._offset = 0  # how far busy() has read the log
        self._live: Set[Tuple[Any, ...]] = set()

    @property
    def pid(self) -> Optional[int]:
        """The current process's id (None before the first launch)."""
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        """Whether the current process has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def send(self, signum: int) -> None:
        """Send ``signum`` (a SIGKILL or SIGTERM is remembered: that end is on purpose)."""
        if self.proc is None:
            return
        if signum in (signal.SIGKILL, signal.SIGTERM):
            self.signalled = signum
        try:
            os.kill(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def reap(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the current process to exit; whether it did."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def launch(self) -> int:
        """Start a new incarnation (the previous one must have exited); its pid."""
        if self.alive():
            raise RuntimeError(f"{self.runner} is still running (pid {self.pid})")
        self._note_exit()
        self.incarnations += 1
        cmd = [
            sys.executable, "-m", "chaoslib.worker",
            "--store", self.url, "--runner", self.runner,
            "--log", str(self.log_path), "--sink", str(self.sink_path),
            "--seed", str(self.seed * 1000 + self.incarnations), *self.args,
        ]  # fmt: skip
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        if self.skew is not None:
            cmd += ["--skew-ms", str(self.skew[0])]
            env.update(self.skew[1])
        inherited = [p for p in [os.environ.get("PYTHONPATH")] if p]
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(BENCHMARKS)] + inherited)
        with open(self.stderr_path, "ab") as err:
            err.write(f"--- incarnation {self.incarnations} ---\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                cmd, cwd=str(BENCHMARKS), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err, start_new_session=True,
            )  # fmt: skip
        self.signalled = None
        return self.proc.pid

    def _note_exit(self) -> None:
        """Record how the previous incarnation ended (once)."""
        if self.proc is None or (self.exits and self.exits[-1][0] == self.proc.pid):
            return
        code = self.proc.poll()
        self.exits.append((self.proc.pid, code))
        on_purpose = self.signalled == signal.SIGKILL or (self.signalled == signal.SIGTERM and code == 0)
        if not on_purpose:
            self.unexpected.append((self.proc.pid, code, self.signalled))

    def check_exit(self) -> None:
        """Record the current process's end if it exited (the harness polls this)."""
        if self.proc is not None and self.proc.poll() is not None:
            self._note_exit()

    def ready(self) -> bool:
        """Whether the current incarnation logged ``running`` (its LeaseCron started)."""
        pid = self.pid
        try:
            with open(self.log_path, "r", encoding="utf-8") as f:
                for line in f:
                    if '"running"' in line:
                        try:
                            event = json.loads(line)
                        except ValueError:
                            continue
                        if event.get("ev") == "running" and event.get("pid") == pid:
                            return True
        except FileNotFoundError:
            return False
        return False

    def busy(self) -> bool:
        """Whether the current process runs a handler now: a ``start`` line without its ``end`` yet.

        Reads the log's new lines since the last call (the file only grows).
        """
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return False
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        pid = self.pid
        for raw in data[:complete].splitlines():
            if b'"start"' not in raw and b'"end"' not in raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            key = (line.get("pid"), line.get("job"), line.get("slot_ms"), line.get("attempt"))
            if line.get("ev") == "start":
                self._live.add(key)
            elif line.get("ev") == "end":
                self._live.discard(key)
        self._live = {k for k in self._live if k[0] == pid}
        return bool(self._live)

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of the instance's stderr file (every incarnation's)."""
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
