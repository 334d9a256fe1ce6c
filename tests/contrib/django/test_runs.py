"""Runs of the project's jobs through the ORM: run after run on SQLite and Redis stores, and
Django's database connections closed around each run (close_old_connections before and after the
handler), seen from the PostgreSQL server's side."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from leasecron import open_store
from tests.conftest import Backend
from tests.helpers import wait_for

from .conftest import FAST, PostgresDatabase, Project, ticks

RUNNING = r"leasecron: running the cron of Django project settings"


def test_a_job_using_the_orm_runs_run_after_run(project: Project, store_backend: Backend, tmp_path: Path) -> None:
    """`manage.py leasecron run` runs the app's job every second, each run writing a row through
    the ORM (SQLite database, CONN_MAX_AGE 60); SIGTERM stops it with exit 0; the store holds a
    successful run for each row."""
    project.set({"STORE": store_backend.url(), **FAST}, SHOP_EVERY="1", SHOP_CONN_MAX_AGE="60")
    project.migrate()
    runner = project.start("leasecron", "run")
    runner.wait_line(RUNNING)
    database = tmp_path / "shop.sqlite3"
    rows = wait_for(lambda: len(ticks(database, "shop.tick")) >= 3 and ticks(database, "shop.tick"), timeout=20)
    runner.signal(signal.SIGTERM)
    assert runner.finish() == 0
    runner.wait_line(r"leasecron: the cron of Django project settings stopped")
    rows = ticks(database, "shop.tick")
    slots = [row["slot_ms"] for row in rows]
    assert len(set(slots)) == len(slots) >= 3
    assert all(later - earlier == 1000 for earlier, later in zip(slots, slots[1:])), slots
    store = open_store(store_backend.url())
    try:
        stored = {run.slot_ms: run.status for run in store.runs("shop.tick", limit=100)}
    finally:
        store.close()
    assert all(stored.get(slot) == "success" for slot in slots), (stored, slots)


@pytest.fixture
def postgres(project: Project, request: pytest.FixtureRequest) -> Iterator[PostgresDatabase]:
    """The project's database on PostgreSQL (a schema of this test's own), migrated."""
    database = project.use_postgres(f"lcdj-{request.node.name[:40]}")
    try:
        yield database
    finally:
        project.close()
        database.close()


def triggered(project: Project, database: PostgresDatabase) -> Dict[str, Any]:
    """Trigger shop.tick, wait for its run's success, and return the row its run wrote."""
    answer = json.loads(project.ok("leasecron", "trigger", "shop.tick", "--wait", "--timeout", "20", "--json"))
    assert answer["result"] == "success", answer
    slot = answer["request"]["slot_ms"]
    columns = "backend, was_open, thread"
    ((backend, was_open, thread),) = database.query(
        f"SELECT {columns} FROM {database.schema}.shop_tick WHERE slot_ms = %s", slot
    )
    return {"slot_ms": slot, "backend": backend, "was_open": was_open, "thread": thread}


def running(project: Project, database: PostgresDatabase, **env: str) -> None:
    project.set({"STORE": f"sqlite:///{project.tmp_path / 'leasecron.db'}", **FAST, "catch_up_ms": 0}, **env)
    project.migrate()
    project.start("leasecron", "run").wait_line(RUNNING)


def test_with_conn_max_age_0_each_run_closes_its_connection_after_it(
    project: Project, postgres: PostgresDatabase
) -> None:
    """CONN_MAX_AGE 0: once a run ended, the server has no connection of the project left (the
    close after the handler), and the next run opens a new one."""
    running(project, postgres, SHOP_CONN_MAX_AGE="0")
    seen: List[Dict[str, Any]] = []
    for _ in range(3):
        seen.append(triggered(project, postgres))
        wait_for(lambda: postgres.backends() == [], timeout=5, message=f"still connected: {postgres.backends()}")
    assert [row["was_open"] for row in seen] == [False, False, False]
    assert len({row["backend"] for row in seen}) == 3


def test_a_connection_older_than_conn_max_age_is_closed_before_the_next_run(
    project: Project, postgres: PostgresDatabase
) -> None:
    """CONN_MAX_AGE 1: the connection a run opened stays open after it (younger than 1 s); the
    next run, 1 s later on the same worker thread, finds it closed when it begins (the close
    before the handler) and opens another; the old one is gone from the server."""
    running(project, postgres, SHOP_CONN_MAX_AGE="1")
    first = triggered(project, postgres)
    opened = time.monotonic()
    assert postgres.backends() == [first["backend"]]
    time.sleep(max(0.0, opened + 1.2 - time.monotonic()))  # the connection is now older than CONN_MAX_AGE
    assert postgres.backends() == [first["backend"]], "nothing closed it between the runs"
    second = triggered(project, postgres)
    assert second["thread"] == first["thread"], "the worker thread is reused from run to run"
    assert second["was_open"] is False and second["backend"] != first["backend"]
    wait_for(lambda: first["backend"] not in postgres.backends(), timeout=5)


def test_a_connection_the_server_closed_between_runs_is_replaced(project: Project, postgres: PostgresDatabase) -> None:
    """CONN_MAX_AGE None (persistent) with CONN_HEALTH_CHECKS: the connection stays open between
    runs; when the server ends it between two runs, the next run on the same thread still works,
    on a new connection (close_old_connections resets Django's health check for the run), run
    after run."""
    running(project, postgres, SHOP_CONN_MAX_AGE="none", SHOP_HEALTH_CHECKS="1")
    previous = triggered(project, postgres)
    for _ in range(3):
        assert postgres.backends() == [previous["backend"]], "a persistent connection stays open between runs"
        postgres.query("SELECT pg_terminate_backend(%s)", previous["backend"])
        wait_for(lambda: postgres.backends() == [], timeout=5)
        row = triggered(project, postgres)
        assert row["thread"] == previous["thread"] and row["was_open"] is True, "the run began on the dead connection"
        assert row["backend"] != previous["backend"]
        previous = row


#: Run by the project's shell: an async handler wrapped as the project's cron wraps it, whose ORM
#: thread (sync_to_async's) opens a connection; prints whether that thread held one before and after.
ASYNC_RUN = """
import asyncio, json
from asgiref.sync import sync_to_async
from django.db import connection
from leasecron.contrib.django import cron
from leasecron.contrib.django.project import around_run
seen = {}
def held(): return connection.connection is not None
def query(): connection.ensure_connection()
async def handler():
    seen["at_start"] = await sync_to_async(held)()
    await sync_to_async(query)()
    seen["during"] = await sync_to_async(held)()
asyncio.run(around_run(handler)())
seen["after"] = asyncio.run(sync_to_async(held)())
print(json.dumps(seen))
"""


def test_an_async_handler_gets_the_closes_in_the_thread_of_its_orm_calls(project: Project) -> None:
    """An async def handler: close_old_connections runs through sync_to_async, in the thread where
    its ORM calls run: with CONN_MAX_AGE 0 its connection is closed after it, with None it stays."""
    project.migrate()
    project.set({"STORE": "memory://"}, SHOP_CONN_MAX_AGE="0")
    assert json.loads(project.ok("shell", "-v", "0", "-c", ASYNC_RUN)) == {
        "at_start": False, "during": True, "after": False,
    }  # fmt: skip
    project.set({"STORE": "memory://"}, SHOP_CONN_MAX_AGE="none")
    assert json.loads(project.ok("shell", "-v", "0", "-c", ASYNC_RUN)) == {
        "at_start": False, "during": True, "after": True,
    }  # fmt: skip
