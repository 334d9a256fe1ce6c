"""Helpers of the command-line tests: the example files and commands run as real processes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import pytest

from tests.helpers import line_reader

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def copy_example(relative: str, directory: Path) -> Path:
    """Copy ``examples/<relative>`` unchanged into ``directory``; returns the copy."""
    target = directory / Path(relative).name
    shutil.copyfile(EXAMPLES / relative, target)
    return target


def environment(store_url: Optional[str] = None, tz: Optional[str] = None) -> Dict[str, str]:
    """This process's environment, with ``LEASECRON_STORE`` (or without it, for the examples'
    default) and ``TZ`` set as asked, and no bytecode written next to copied examples."""
    env = dict(os.environ)
    env.pop("LEASECRON_STORE", None)
    if store_url is not None:
        env["LEASECRON_STORE"] = store_url
    if tz is not None:
        env["TZ"] = tz
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(
    args: Sequence[str], cwd: Optional[Path] = None, env: Optional[Mapping[str, str]] = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` (``-m leasecron ...``, ``-m flask ...``) and capture its output."""
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
    )  # fmt: skip


class Process:
    """A long-running command as a real process; a thread collects the lines of its stderr."""

    def __init__(self, args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *args], cwd=cwd, env=dict(env),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: List[str] = []
        self._lock = threading.Lock()
        assert self.proc.stderr is not None
        self._reader = line_reader(self.proc.stderr, self._add)
        self._reader.start()

    def _add(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)

    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_line(self, pattern: str, timeout: float = 15, after: int = 0) -> int:
        """Wait for a stderr line (from line index ``after`` on) that matches ``pattern``; its index."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                for i in range(after, len(self.lines)):
                    if regex.search(self.lines[i]):
                        return i
            if time.monotonic() > deadline or self.proc.poll() is not None and not self._reader.is_alive():
                pytest.fail(f"no stderr line matching {pattern!r} within {timeout} s"
                            f" (exit code {self.proc.poll()}):\n{self.stderr()}")  # fmt: skip
            time.sleep(0.02)

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 20) -> int:
        """Wait for the exit (fail the test after ``timeout``); the exit code."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the process did not exit within {timeout} s:\n{self.stderr()}")
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


#: An rst comment naming an example file, followed by a code block that must equal that file.


def parse_table(text: str) -> List[Dict[str, str]]:
    """The rows of the first table in ``text`` (a header line, a rule of dashes, the rows, up to a
    blank line) as dicts by header; the columns are where the rule's dashes are."""
    lines = text.splitlines()
    rule_at = next(i for i, line in enumerate(lines) if line.startswith("-") and set(line) <= {"-", " "})
    spans = [m.span() for m in re.finditer(r"-+", lines[rule_at])]

    def cells(line: str) -> List[str]:
        ends = [start for start, _ in spans[1:]] + [len(line) + 1]
        return [line[start:end].strip() for (start, _), end in zip(spans, ends)]

    headers = cells(lines[rule_at - 1])
    rows = []
    for line in lines[rule_at + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(headers, cells(line))))
    return rows
