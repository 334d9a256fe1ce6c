"""Slow, mostly waiting processes of a module's tests, all started at the first test's call.

A test that starts a benchmark or a demo and then mostly waits on its timers costs its whole run
in CI time when the copies of it (one per store) run one after another. :class:`StartedAtOnce`
starts every selected copy's process when the first of them asks (a module-scoped fixture holds
it), and each test then waits for its own. A start that fails (a backend unavailable, a skip) is
kept and raised in the test it belongs to; processes no test waited for are stopped at the end
of the module (:meth:`StartedAtOnce.close`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Dict, Generic, List, Tuple, TypeVar, Union

import pytest

__all__ = ["StartedAtOnce", "ended", "start_logged", "stop_process", "wait_or_fail"]

#: What a start gives its test: the process first, then whatever the test needs with it.
Started = TypeVar("Started", bound=Tuple[Any, ...])


def start_logged(argv: List[str], out: Path, **popen: Any) -> "subprocess.Popen[str]":
    """Start ``argv``, its stdout and stderr written to the files ``stdout`` and ``stderr`` in ``out``."""
    with open(out / "stdout", "w") as stdout, open(out / "stderr", "w") as stderr:
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, text=True, **popen)


def ended(proc: "subprocess.Popen[str]", out: Path) -> "subprocess.CompletedProcess[str]":
    """``proc``, which has ended, with what :func:`start_logged` wrote into ``out``."""
    stdout, stderr = ((out / name).read_text() for name in ("stdout", "stderr"))
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def stop_process(proc: "subprocess.Popen[str]", grace_s: float = 30) -> None:
    """Stop ``proc`` if it still runs: SIGTERM (the scripts clean up on it), then SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_or_fail(proc: "subprocess.Popen[str]", timeout_s: float, what: str) -> None:
    """Wait until ``proc`` ends; after ``timeout_s`` stop it and fail the test naming ``what``."""
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        pytest.fail(f"{what} did not end within {timeout_s} s")


class StartedAtOnce(Generic[Started]):
    """The processes of a module's selected tests, keyed by a test parameter (a store, say).

    A subclass gives :meth:`selected` (the keys of the copies this session runs, see
    :func:`tests.conftest.selected_items`) and :meth:`launch` (start one: the process first in
    the tuple it returns); a test calls :meth:`started` for its own key. A module-scoped fixture
    yields one inside ``with contextlib.closing(...)``: closed at the end of the module.
    """

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._request = request
        self._tmp_path_factory = tmp_path_factory
        self._started: Dict[str, Union[Started, BaseException]] = {}

    def selected(self) -> List[str]:
        """The keys of the copies of this module's tests that run in this session."""
        raise NotImplementedError

    def launch(self, key: str) -> Started:
        """Start the process of ``key``; an exception here is raised in ``key``'s own test."""
        raise NotImplementedError

    def started(self, key: str) -> Started:
        """What :meth:`launch` gave for ``key`` (the first call starts every selected copy)."""
        if not self._started:
            for each in self.selected():
                self._start(each)
        if key not in self._started:
            self._start(key)
        started = self._started[key]
        if isinstance(started, BaseException):
            raise started
        return started

    def _start(self, key: str) -> None:
        try:
            self._started[key] = self.launch(key)
        except (Exception, pytest.fail.Exception, pytest.skip.Exception) as exc:  # raised in its own test
            self._started[key] = exc

    def close(self) -> None:
        """Stop every process still going (its test never waited for it)."""
        for started in self._started.values():
            if not isinstance(started, BaseException):
                stop_process(started[0])
