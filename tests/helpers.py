"""Small helpers the test modules share."""

from __future__ import annotations

import multiprocessing
import queue
import subprocess
import threading
import time
from typing import IO, Any, Callable, List, Optional, Sequence, TypeVar

import pytest

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: Optional[str] = None
) -> T:
    """Poll ``condition`` until it returns a true value (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(message or f"condition not met within {timeout} s: {condition}")
        time.sleep(interval)


def race_in_processes(target: Callable[..., None], args: Sequence[Sequence[Any]], timeout: float = 30) -> List[Any]:
    """Run ``target(*a, barrier, results)`` in one spawned process per ``a`` in ``args``.

    Every child gets a barrier for all of them (to start a race at once) and a
    queue to put its one result on. Returns the results; fails the test if a
    child does not report within ``timeout`` or exits with an error code.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, results), daemon=True) for a in args]
    for p in procs:
        p.start()
    collected: List[Any] = []
    try:
        for _ in procs:
            collected.append(results.get(timeout=timeout))
    except queue.Empty:
        pytest.fail(f"only {len(collected)} of {len(procs)} processes reported: {collected}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return collected


def line_reader(
    stream: IO[Any],
    on_line: Callable[[str], None],
    name: Optional[str] = None,
    at_end: Callable[[], None] = lambda: None,
) -> threading.Thread:
    """A daemon thread, not started, that hands each line of ``stream`` to ``on_line`` (bytes decoded
    as UTF-8, bad bytes replaced; without its newline), and calls ``at_end`` once the stream ends."""

    def read() -> None:
        for raw in stream:
            on_line((raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).rstrip("\n"))
        at_end()

    return threading.Thread(target=read, name=name, daemon=True)


def reap(proc: "subprocess.Popen[Any]", reader: threading.Thread) -> None:
    """After a SIGKILL: wait for ``proc`` to end (up to 10 s), then for the ``reader`` of its stdout
    (up to 5 s), and close its stdout."""
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass
    reader.join(5)
    if proc.stdout is not None:
        proc.stdout.close()
