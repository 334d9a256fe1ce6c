"""Workers (leasecron/engine/workers.py): threads reused from task to task, grown without bound,
gone when idle; each task in a fresh contextvars context and under its own thread name."""

from __future__ import annotations

import contextvars
import logging
import threading
from typing import List

import pytest

from leasecron.engine.workers import IDLE_NAME, Workers
from tests.helpers import wait_for

VAR: "contextvars.ContextVar[str]" = contextvars.ContextVar("VAR", default="unset")


class Log:
    """What tasks saw, in order."""

    def __init__(self) -> None:
        self.items: List[object] = []
        self.lock = threading.Lock()

    def add(self, item: object) -> None:
        with self.lock:
            self.items.append(item)


def test_a_worker_is_a_daemon_named_leasecron_worker_when_idle() -> None:
    workers = Workers(idle_s=5)
    seen = Log()
    workers.submit("leasecron-run-job@0#1", lambda: seen.add(threading.current_thread()))
    wait_for(lambda: workers.idle() == 1, 2)
    thread = seen.items[0]
    assert isinstance(thread, threading.Thread) and thread.daemon
    assert thread.name == IDLE_NAME
    workers.close()


def test_a_task_gets_its_name_while_it_runs() -> None:
    workers = Workers(idle_s=5)
    names = Log()
    workers.submit("first", lambda: names.add(threading.current_thread().name))
    wait_for(lambda: workers.idle() == 1, 2)
    workers.submit("second", lambda: names.add(threading.current_thread().name))
    wait_for(lambda: len(names.items) == 2, 2)
    assert names.items == ["first", "second"]
    workers.close()


def test_an_idle_thread_is_reused() -> None:
    workers = Workers(idle_s=5)
    idents = Log()
    for _ in range(5):
        workers.submit("task", lambda: idents.add(threading.get_ident()))
        wait_for(lambda: workers.idle() == 1, 2)
    assert len(idents.items) == 5 and len(set(idents.items)) == 1
    workers.close()


def test_tasks_never_wait_for_each_other() -> None:
    """No bound: 20 tasks that each wait for all the others all run at once, on 20 threads."""
    workers = Workers(idle_s=5)
    barrier = threading.Barrier(20, timeout=5)
    idents = Log()

    def task() -> None:
        barrier.wait()
        idents.add(threading.get_ident())

    for _ in range(20):
        workers.submit("task", task)
    wait_for(lambda: len(idents.items) == 20, 5)
    assert len(set(idents.items)) == 20
    wait_for(lambda: workers.idle() == 20, 2)
    workers.close()


def test_an_idle_thread_exits_after_idle_s() -> None:
    workers = Workers(idle_s=0.2)
    threads = Log()
    workers.submit("task", lambda: threads.add(threading.current_thread()))
    wait_for(lambda: len(threads.items) == 1, 2)
    thread = threads.items[0]
    assert isinstance(thread, threading.Thread)
    thread.join(2)
    assert not thread.is_alive()
    assert workers.idle() == 0
    workers.submit("again", lambda: threads.add(threading.current_thread()))  # a new thread is started
    wait_for(lambda: len(threads.items) == 2, 2)
    assert threads.items[1] is not thread
    workers.close()


def test_close_ends_idle_threads_at_once_and_busy_ones_after_their_task() -> None:
    workers = Workers(idle_s=60)
    gate = threading.Event()
    threads = Log()

    def blocked() -> None:
        threads.add(threading.current_thread())
        gate.wait(5)

    workers.submit("idle-soon", lambda: threads.add(threading.current_thread()))
    wait_for(lambda: workers.idle() == 1, 2)
    workers.submit("busy", blocked)  # takes the idle thread
    workers.submit("busy-too", blocked)  # a second thread
    wait_for(lambda: len(threads.items) == 3, 2)
    workers.submit("idle-again", lambda: None)
    wait_for(lambda: workers.idle() == 1, 2)
    idle = [t for t in threading.enumerate() if t.name == IDLE_NAME and t not in threads.items]
    workers.close()
    for thread in idle:
        thread.join(2)
        assert not thread.is_alive()
    busy = {t for t in threads.items if isinstance(t, threading.Thread) and t.is_alive()}
    assert len(busy) == 2  # the first thread, reused, and a second one
    gate.set()
    for thread in busy:
        thread.join(2)
        assert not thread.is_alive()
    ran = threading.Event()
    workers.submit("after-close", ran.set)  # still runs, on a thread of its own
    assert ran.wait(2)


def test_each_task_runs_in_a_fresh_context() -> None:
    workers = Workers(idle_s=5)
    seen = Log()

    def task() -> None:
        seen.add(VAR.get())
        VAR.set("set by a task")

    for _ in range(3):
        workers.submit("task", task)
        wait_for(lambda: workers.idle() == 1, 2)
    assert seen.items == ["unset", "unset", "unset"]
    workers.close()


def test_a_task_that_raises_is_logged_and_the_thread_lives_on(caplog: pytest.LogCaptureFixture) -> None:
    workers = Workers(idle_s=5)
    idents = Log()

    def bad() -> None:
        idents.add(threading.get_ident())
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="leasecron"):
        workers.submit("bad-task", bad)
        wait_for(lambda: workers.idle() == 1, 2)
    workers.submit("good", lambda: idents.add(threading.get_ident()))
    wait_for(lambda: len(idents.items) == 2, 2)
    assert idents.items[0] == idents.items[1]
    assert any("worker task bad-task failed" in r.getMessage() and r.exc_info for r in caplog.records)
    workers.close()
