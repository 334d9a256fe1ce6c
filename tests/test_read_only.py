"""Reading never creates (issue 12, item 5): ``leasecron runs`` and ``jobs`` (and ``flask leasecron
runs|jobs``) open their store with ``create=False``.

A missing SQLite file, a SQLite file without the table, a missing PostgreSQL schema or table: exit
1 with one line naming what is missing, and nothing is created (no file, no -wal or -shm, no schema,
no table; an existing file keeps its bytes and mtime). A store that exists is read as before; a
reader never migrates an older schema and refuses a newer one. On real SQLite files and the
session's PostgreSQL (a schema of each test's own, dropped after it).
"""

from __future__ import annotations

import sqlite3
import subprocess
import textwrap
import uuid
from pathlib import Path
from typing import Any, Iterator, List

import pytest

import leasecron
from leasecron import SQLiteStore, Store, StoreError, open_store
from leasecron.cli import commands
from tests.cli_support import environment, parse_table, run
from tests.conftest import SERVERS
from tests.stores.test_postgres import _query as pg_query

#: The reading commands, as ``leasecron`` arguments before the URL.
READERS = [["runs"], ["runs", "--json"], ["jobs"], ["jobs", "--json"]]


def pg_address() -> str:
    """``host:port/dbname`` of the session's PostgreSQL."""
    host, port, dbname = SERVERS.postgres()
    return f"{host}:{port}/{dbname}"


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh schema name (``t<hex>``) on the session's PostgreSQL, dropped after the test."""
    name = "t" + uuid.uuid4().hex[:12]
    yield name
    pg_query(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _leasecron(*args: str, cwd: Path | None = None, env: Any = None) -> subprocess.CompletedProcess:
    return run(["-m", "leasecron", *args], cwd=cwd, env=env)


def _refused(result: subprocess.CompletedProcess, *names: str) -> None:
    """Exit 1 with one line on stderr, naming each of ``names``; nothing on stdout."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for name in names:
        assert name in result.stderr, result.stderr


def _populate(store: Store) -> int:
    """One finished run of job "alpha"; its slot."""
    slot = store.now_ms() // 60_000 * 60_000
    run_ = store.claim("alpha", slot, runner="host-1", max_late_ms=120_000).run
    assert run_ is not None and store.finish("alpha", slot, run_.token, "success")
    return slot


# -- SQLite ----------------------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_missing_sqlite_file_is_an_error_and_is_not_created(command: List[str], tmp_path: Path) -> None:
    """`leasecron runs|jobs sqlite:///<dir>/typo.db`: exit 1 naming the file; no .db, -wal or -shm."""
    path = tmp_path / "typo.db"
    _refused(_leasecron(*command, f"sqlite:///{path}"), str(path), "does not exist")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.processes
@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_sqlite_file_without_the_table_is_an_error_and_stays_as_it_was(command: List[str], tmp_path: Path) -> None:
    """An existing SQLite file without the runs table: exit 1 naming the table; the file keeps its
    bytes and mtime, and no -wal or -shm appears (no WAL switch, no table)."""
    path = tmp_path / "other.db"
    conn = sqlite3.connect(str(path))
    conn.execute("CREATE TABLE inventory (item TEXT)")
    conn.commit()
    conn.close()
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    _refused(_leasecron(*command, f"sqlite:///{path}?table=app_runs"), "'app_runs'", str(path))
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert list(tmp_path.iterdir()) == [path]


# -- PostgreSQL ------------------------------------------------------------------------------------


def _schema_exists(name: str) -> bool:
    return bool(pg_query("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)))


def _tables(schema: str) -> List[str]:
    return sorted(row[0] for row in pg_query("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)))


@pytest.mark.processes
def test_a_missing_postgres_schema_is_an_error_and_is_not_created(pg_schema: str) -> None:
    """`leasecron runs|jobs postgresql://...?schema=<new>`: exit 1 naming the schema; it still does
    not exist after."""
    for command in READERS:
        _refused(_leasecron(*command, f"postgresql://{pg_address()}?schema={pg_schema}"), f"'{pg_schema}'")
    assert not _schema_exists(pg_schema)


@pytest.mark.processes
def test_a_missing_postgres_table_is_an_error_and_is_not_created(pg_schema: str) -> None:
    """A schema without leasecron's tables: exit 1 naming schema.table; the schema stays empty."""
    pg_query(f"CREATE SCHEMA {pg_schema}")
    for command in READERS:
        url = f"postgresql://{pg_address()}?schema={pg_schema}&table=app_runs"
        _refused(_leasecron(*command, url), f"{pg_schema}.app_runs")
    assert _tables(pg_schema) == []


def test_a_postgres_reader_never_migrates_an_older_schema_and_refuses_a_newer_one(pg_schema: str) -> None:
    """create=False reads a schema stamped with an older version as it is (its version unchanged)
    and refuses a newer one ("upgrade leasecron")."""
    from leasecron.stores.postgres import SCHEMA_VERSION

    url = f"postgresql://{pg_address()}?schema={pg_schema}"
    with open_store(url) as writer:
        slot = _populate(writer)
    meta = f"{pg_schema}.leasecron_runs_meta"
    version_sql = f"SELECT value FROM {meta} WHERE key = 'schema_version'"
    pg_query(f"UPDATE {meta} SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION - 1),))
    with open_store(url, create=False) as reader:
        assert reader.jobs() == ["alpha"] and [r.slot_ms for r in reader.runs("alpha")] == [slot]
    assert pg_query(version_sql) == [(str(SCHEMA_VERSION - 1),)]
    pg_query(f"UPDATE {meta} SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with open_store(url, create=False) as reader:
        with pytest.raises(StoreError, match="upgrade leasecron"):
            reader.jobs()


# -- existing stores, and the stores of an app -------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_jobs_and_runs_read_an_existing_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A populated store is read by `jobs` and `runs` (opened with create=False) as before."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'app.db'}"
    else:
        url = f"postgresql://{pg_address()}?schema={request.getfixturevalue('pg_schema')}"
    with open_store(url) as writer:
        _populate(writer)
    jobs = _leasecron("jobs", url)
    assert jobs.returncode == 0, jobs.stderr
    assert [(row["job"], row["runs"], row["status"]) for row in parse_table(jobs.stdout)] == [("alpha", "1", "success")]
    runs = _leasecron("runs", url)
    assert runs.returncode == 0, runs.stderr
    assert [(row["job"], row["runner"]) for row in parse_table(runs.stdout)] == [("alpha", "host-1")]


APP_MODULE = """
import os
import leasecron

cron = leasecron.LeaseCron(os.environ["LEASECRON_STORE"], runner="app")


@cron.job("0 0 1 1 *", name="yearly")
def yearly():
    pass
"""


@pytest.mark.processes
def test_jobs_of_an_app_whose_store_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    """`leasecron jobs --app module:cron` reads the app's own store without creating it."""
    (tmp_path / "appmod.py").write_text(textwrap.dedent(APP_MODULE))
    path = tmp_path / "app.db"
    _refused(_leasecron("jobs", "--app", "appmod:cron", cwd=tmp_path, env=environment(f"sqlite:///{path}")),
             str(path))  # fmt: skip
    assert not path.exists()


def test_flask_runs_and_jobs_create_nothing_and_leave_the_app_store_as_it_was(tmp_path: Path) -> None:
    """`flask leasecron runs|jobs` on an app whose store does not exist: exit 1 naming the file,
    nothing created; the app's store still creates its schema when the app uses it."""
    from flask import Flask

    from leasecron.contrib.flask import LeaseCronExtension

    path = tmp_path / "flask.db"
    app = Flask("reader")
    app.config["LEASECRON_STORE"] = f"sqlite:///{path}"
    cron = LeaseCronExtension().init_app(app)
    runner = app.test_cli_runner()
    for args in (["leasecron", "runs"], ["leasecron", "jobs"]):
        result = runner.invoke(args=args)
        assert result.exit_code == 1, result.output
        assert str(path) in result.output and "does not exist" in result.output
        assert list(tmp_path.iterdir()) == []
    assert vars(cron.store)["create"] is True  # reading() gave the flag back
    _populate(cron.store)
    assert commands.runs_output(cron.store, None, 20, as_json=False)[0].startswith("job ")
    cron.store.close()


def test_reading_leaves_a_store_without_the_flag_alone() -> None:
    """commands.reading() switches off `create` only where a store has it, and restores it."""

    class Plain(leasecron.MemoryStore):
        def __getattribute__(self, name: str) -> Any:
            if name == "create":
                raise AttributeError(name)
            return super().__getattribute__(name)

    with commands.reading(Plain()) as store:
        assert store.jobs() == []
    sqlite = SQLiteStore("never-opened.db")
    with commands.reading(sqlite):
        assert sqlite.create is False
    assert sqlite.create is True
