"""Run the gunicorn example (``examples/gunicorn``) as a real process tree and read its log.

A :class:`Gunicorn` copies ``app.py`` and ``gunicorn.conf.py`` unchanged
into a directory of the test's own and starts ``python -m gunicorn -c
gunicorn.conf.py`` there, on a free loopback port, in a session of its own,
with ``LEASECRON_STORE`` set to the test's store. Master and workers share
one stderr pipe; a reader thread collects its lines, each with the time it
was read, under a condition variable: :meth:`Gunicorn.wait_line` waits with a
deadline for a line that matches, looking at every line seen so far.
:meth:`Gunicorn.close` kills the whole session (SIGKILL) if anything of it is
still alive, and is called in teardown even on failure.

The lines read: gunicorn's (``[date] [pid] [LEVEL] message``), the
hooks' (``leasecron: worker <pid> runs ...``) and the example job's
(``<date> <time>,<ms> [pid] INFO tick <slot_ms> attempt <n> (<reason>)``,
``... tick <slot_ms> done``, ``... tick <slot_ms> aborted (<reason>)``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Dict, List, Optional, Pattern, Sequence

import pytest

from tests.helpers import line_reader, reap

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "gunicorn"
EXAMPLE_FILES = ("app.py", "gunicorn.conf.py")

_TICK = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[(?P<pid>\d+)\] INFO "
    r"tick (?P<slot>\d+) (?:attempt (?P<attempt>\d+) \((?P<reason>[\w-]+)\)|(?P<done>done)|aborted \((?P<why>\w+)\))$"
)
_BOOTED = re.compile(r"Booting worker with pid: (\d+)")
_RUNS = re.compile(r"leasecron: worker (\d+) runs <LeaseCron ")
_LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")
_EXITING = re.compile(r"Worker exiting \(pid: (\d+)\)")


@dataclasses.dataclass(frozen=True)
class Tick:
    """One line of the example job: ``kind`` is ``start``, ``done`` or ``aborted``."""

    index: int
    pid: int
    slot_ms: int
    kind: str
    t_ms: int
    attempt: Optional[int] = None
    reason: Optional[str] = None


def _log_ms(stamp: str) -> int:
    """Epoch ms of a ``logging`` asctime (host local time, ms resolution)."""
    return int(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000)


def now_ms() -> int:
    """The host's wall clock in epoch ms."""
    return time.time_ns() // 1_000_000


def _control_socket_args() -> List[str]:
    """gunicorn 24+ opens a control socket in the home directory: tests turn it off."""
    from gunicorn.config import KNOWN_SETTINGS

    return ["--no-control-socket"] if any(s.name == "control_socket_disable" for s in KNOWN_SETTINGS) else []


def app_dir(tmp_path: Path, name: str = "site") -> Path:
    """A directory holding unchanged copies of the example's files."""
    target = tmp_path / name
    target.mkdir(exist_ok=True)
    for file in EXAMPLE_FILES:
        shutil.copyfile(EXAMPLE_DIR / file, target / file)
    return target


class Gunicorn:
    """One gunicorn server (master and workers) started from the example's conf file."""

    def __init__(
        self,
        name: str,
        cwd: Path,
        store_url: str,
        *,
        workers: int,
        worker_class: str = "sync",
        extra: Sequence[str] = (),
        app: str = "app:app",
    ) -> None:
        self.name = name
        self.cwd = cwd
        self.workers = workers
        self.lines: List[str] = []
        self.seen_ms: List[int] = []
        self._cond = threading.Condition()
        cmd = [
            sys.executable, "-m", "gunicorn",
            "-c", "gunicorn.conf.py",
            "--bind", "127.0.0.1:0",
            "--workers", str(workers),
            "--worker-class", worker_class,
            *_control_socket_args(),
            *extra,
            app,
        ]  # fmt: skip
        if worker_class == "gthread":
            cmd[-1:-1] = ["--threads", "4"]
        env = dict(os.environ, LEASECRON_STORE=store_url, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        self.proc = subprocess.Popen(
            cmd,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self._reader = line_reader(self.proc.stdout, self._add, name=f"read-{name}")
        self._reader.start()

    @property
    def master(self) -> int:
        """The master's pid (``python -m gunicorn`` is the master)."""
        return self.proc.pid

    def _add(self, line: str) -> None:
        with self._cond:
            self.lines.append(line)
            self.seen_ms.append(now_ms())
            self._cond.notify_all()

    # -- the log ---------------------------------------------------------------------

    def snapshot(self) -> List[str]:
        """The lines so far (a copy)."""
        with self._cond:
            return list(self.lines)

    def wait_line(self, match: Callable[[str], object], timeout: float, what: str) -> int:
        """The index of the first line (old or new) for which ``match`` is true; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            index = 0
            while True:
                while index < len(self.lines):
                    if match(self.lines[index]):
                        return index
                    index += 1
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    break
                self._cond.wait(min(left, 0.5))
        pytest.fail(f"{self.name}: no line {what} within {timeout} s\n{self.describe()}")

    def wait_pattern(self, pattern: Pattern[str], timeout: float) -> "re.Match[str]":
        """The first match of ``pattern`` in a line (old or new)."""
        index = self.wait_line(pattern.search, timeout, f"matching {pattern.pattern!r}")
        found = pattern.search(self.snapshot()[index])
        assert found is not None
        return found

    def pids(self, pattern: Pattern[str]) -> List[int]:
        """The pids in the lines matching ``pattern`` (group 1), in order."""
        return [int(m.group(1)) for m in map(pattern.search, self.snapshot()) if m]

    def booted(self) -> List[int]:
        """Every worker pid gunicorn booted, in order."""
        return self.pids(_BOOTED)

    def running(self) -> List[int]:
        """The workers whose cron the post_fork hook started."""
        return self.pids(_RUNS)

    def exited(self) -> List[int]:
        """The workers that logged their exit."""
        return self.pids(_EXITING)

    def port(self, timeout: float = 20) -> int:
        """The port gunicorn listens on."""
        return int(self.wait_pattern(_LISTENING, timeout).group(1))

    def wait_running(self, pids: Optional[Sequence[int]] = None, timeout: float = 30) -> List[int]:
        """Wait until ``pids`` (default: as many new workers as configured) run their cron; those pids."""
        deadline = time.monotonic() + timeout

        def ready() -> Optional[List[int]]:
            started = self.running()
            if pids is not None:
                return list(pids) if all(p in started for p in pids) else None
            return started[: self.workers] if len(started) >= self.workers else None

        with self._cond:
            while True:
                found = ready()
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    break
                self._cond.wait(min(left, 0.5))
        pytest.fail(f"{self.name}: the workers' crons did not start within {timeout} s\n{self.describe()}")

    def ticks(self) -> List[Tick]:
        """The example job's lines so far."""
        parsed = (parse_tick(line, index) for index, line in enumerate(self.snapshot()))
        return [tick for tick in parsed if tick is not None]

    def wait_tick(self, match: Callable[[Tick], bool], timeout: float, what: str) -> Tick:
        """The first tick line (old or new) that matches."""

        def line_matches(line: str) -> bool:
            tick = parse_tick(line, -1)
            return tick is not None and match(tick)

        index = self.wait_line(line_matches, timeout, what)
        tick = parse_tick(self.snapshot()[index], index)
        assert tick is not None
        return tick

    # -- signals and the end ------------------------------------------------------------

    def send(self, signum: int) -> int:
        """Signal the master; the wall clock (epoch ms) right after."""
        os.kill(self.master, signum)
        return now_ms()

    def wait_exit(self, timeout: float) -> int:
        """Wait for the master to exit; its exit code."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name}: gunicorn did not exit within {timeout} s\n{self.describe()}")
        self._reader.join(10)  # workers still holding the pipe would keep it open
        return code

    def close(self) -> None:
        """Kill the whole session if anything of it is alive, reap the master, and keep the log
        (``<cwd>/<name>.log``)."""
        try:
            os.killpg(self.master, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reap(self.proc, self._reader)
        (self.cwd / f"{self.name}.log").write_text("\n".join(self.snapshot()) + "\n")

    def describe(self, tail: int = 80) -> str:
        """The last lines of the log, for a failure message."""
        lines = self.snapshot()
        return f"--- {self.name} (master {self.master}, exit {self.proc.poll()}), last {tail} lines:\n" + "\n".join(
            lines[-tail:]
        )


def parse_tick(line: str, index: int) -> Optional[Tick]:
    """The example job's line ``line`` (the ``index``-th of the log) as a Tick; None for another line."""
    m = _TICK.match(line)
    if not m:
        return None
    kind = "start" if m.group("attempt") else "done" if m.group("done") else "aborted"
    return Tick(
        index=index,
        pid=int(m.group("pid")),
        slot_ms=int(m.group("slot")),
        kind=kind,
        t_ms=_log_ms(m.group("date")),
        attempt=int(m.group("attempt")) if m.group("attempt") else None,
        reason=m.group("reason") or m.group("why"),
    )


def by_slot(ticks: Sequence[Tick]) -> Dict[int, List[Tick]]:
    """The tick lines grouped by slot, in log order."""
    grouped: Dict[int, List[Tick]] = {}
    for tick in ticks:
        grouped.setdefault(tick.slot_ms, []).append(tick)
    return grouped
