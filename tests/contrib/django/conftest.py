"""The Django test project (``project/``) run as real processes: ``python manage.py ...`` with
the settings each test gives through the environment (see ``project/settings.py``), so that no
Django state is left in the pytest process."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from tests.cli_support import Process, environment
from tests.conftest import BACKENDS, SERVERS, Backend

PROJECT = Path(__file__).resolve().parent / "project"
#: Options that make a run start at once and end fast: short leases, no jitter.
FAST = {"lease_ms": 1_000, "heartbeat_ms": 100, "jitter_ms": 0, "poll_ms": 200}


class Project:
    """The test project with one ``LEASECRON`` setting and one database (SQLite in ``tmp_path``
    unless :meth:`use_postgres`); :meth:`manage` runs ``manage.py`` and waits, :meth:`start`
    starts it as a long-running process."""

    def __init__(self, tmp_path: Path, setting: Any) -> None:
        self.tmp_path = tmp_path
        self.env = environment()
        self.env["SHOP_DB"] = f"sqlite:{tmp_path / 'shop.sqlite3'}"
        self.set(setting)
        self._processes: List[Process] = []

    def set(self, setting: Any, **env: str) -> None:
        """Make ``setting`` the project's ``LEASECRON`` (``"unset"``: none), and set ``env``."""
        self.env["LEASECRON_SETTING"] = setting if setting == "unset" else json.dumps(setting)
        self.env.update(env)

    def use_postgres(self, application: str) -> "PostgresDatabase":
        """Put the project's database in a schema of its own on the test PostgreSQL, connecting
        as ``application`` (pg_stat_activity's application_name)."""
        database = PostgresDatabase(application)
        self.env["SHOP_DB"] = database.shop_db()
        return database

    def manage(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``python manage.py ARGS`` in the project, its output captured."""
        return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=self.env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    def ok(self, *args: str, timeout: float = 60) -> str:
        """``manage(ARGS)`` that must exit 0; its stdout."""
        done = self.manage(*args, timeout=timeout)
        assert done.returncode == 0, f"manage.py {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def migrate(self) -> None:
        self.ok("migrate", "--skip-checks", "-v", "0")

    def start(self, *args: str) -> Process:
        """``python manage.py ARGS`` as a long-running process (stderr collected); ended at teardown."""
        process = Process(["manage.py", *args], PROJECT, self.env)
        self._processes.append(process)
        return process

    def close(self) -> None:
        for process in self._processes:
            process.kill()


class PostgresDatabase:
    """A schema of its own on the test PostgreSQL, dropped at the end."""

    def __init__(self, application: str) -> None:
        import psycopg2

        self.host, self.port, self.dbname = SERVERS.postgres()
        self.schema = "dj" + uuid.uuid4().hex[:12]
        self.application = application
        self.conn = psycopg2.connect(host=self.host, port=self.port, dbname=self.dbname)
        self.conn.autocommit = True
        self.query(f"CREATE SCHEMA {self.schema}")

    def shop_db(self) -> str:
        return f"postgresql:{self.host}:{self.port}:{self.dbname}:{self.schema}:{self.application}"

    def query(self, sql: str, *params: Any) -> List[Any]:
        with self.conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def backends(self) -> List[int]:
        """The pids of the server's backends connected as the project (by its application_name)."""
        rows = self.query("SELECT pid FROM pg_stat_activity WHERE application_name = %s", self.application)
        return sorted(row[0] for row in rows)

    def close(self) -> None:
        self.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                   self.application)  # fmt: skip
        self.query(f"DROP SCHEMA {self.schema} CASCADE")
        self.conn.close()


@pytest.fixture(params=["sqlite", "redis"])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The leasecron store of the project: SQLite, then Redis (in CI it must be reachable)."""
    backend = BACKENDS[request.param](tmp_path)
    yield backend
    backend.close()


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    """The project on a SQLite leasecron store in ``tmp_path`` with the fast options."""
    made = Project(tmp_path, {"STORE": f"sqlite:///{tmp_path / 'leasecron.db'}", **FAST})
    yield made
    made.close()


def ticks(database: Path, job: Optional[str] = None) -> List[Dict[str, Any]]:
    """The rows of ``shop_tick`` in the project's SQLite database, oldest first."""
    import sqlite3

    with sqlite3.connect(database) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(row) for row in conn.execute("SELECT * FROM shop_tick ORDER BY id")]
    return [row for row in rows if job is None or row["job"] == job]
