"""A PostgreSQL primary with a streaming standby, started by the tests themselves.

:class:`PgStandby` is a :class:`~tests.pg_servers.PgServer` whose data directory is a
``pg_basebackup`` of a running one (``-R``: ``standby.signal`` and a ``primary_conninfo`` over
127.0.0.1 carrying the standby's ``application_name``, the name ``synchronous_standby_names``
uses). :class:`PgPair` holds a primary and its standby and plays the operator: it makes the
standby synchronous or not (``ALTER SYSTEM`` on the primary, after the base backup, so the
standby never inherits the setting and, once promoted, commits alone), fails over (``kill -9``
of the primary, ``pg_promote()`` on the standby, roles swapped) and brings the old primary back
as the new standby (a fresh base backup on its old port). Its :meth:`PgPair.url` names both
ports with ``target_session_attrs=read-write``, so one URL follows every failover. No
replication slot: a standby that falls behind is not what these tests are about.

The servers keep :class:`PgServer`'s conventions (run as ``embedded_postgres`` when root,
free ports, poll loops with deadlines, :meth:`PgPair.stop` tears everything down).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, List, Optional, Tuple

from tests.pg_servers import START_TIMEOUT, PgServer, pg_bin_dir
from tests.servers import HOST, POLL_INTERVAL

#: How long a standby may take to stream (or to become synchronous) after it starts, in seconds.
STREAM_TIMEOUT = 30.0


class PgStandby(PgServer):
    """A hot standby of ``primary`` named ``name`` (its ``application_name``), made by ``pg_basebackup``
    when it first starts. :meth:`promote` makes it a primary."""

    def __init__(self, primary: PgServer, directory: Path, name: str, *, port: Optional[int] = None) -> None:
        super().__init__(directory, port=port, max_connections=primary.max_connections)
        self.primary = primary
        self.name = name

    def _data_command(self) -> Tuple[List[str], str]:
        """The data directory is a base backup of the primary (not a new cluster)."""
        source = f"host={HOST} port={self.primary.port} user={self.user} application_name={self.name}"
        command = [
            str(self.bin_dir / "pg_basebackup"), "-d", source, "-D", str(self.data),
            "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
        ]  # fmt: skip
        return command, f"pg_basebackup of {self.primary!r}"

    def promote(self) -> None:
        """End recovery (``pg_promote()``), and return once the server accepts writes (polled: the
        function's own wait polls every 100 ms)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_promote(false)")
                deadline = time.monotonic() + START_TIMEOUT
                while True:
                    cur.execute("SELECT pg_is_in_recovery()")
                    if not cur.fetchone()[0]:
                        return
                    if time.monotonic() >= deadline:
                        raise RuntimeError(f"{self!r} was not promoted within {START_TIMEOUT} s")
                    time.sleep(POLL_INTERVAL / 4)
        finally:
            conn.close()

    def __repr__(self) -> str:
        return f"PgStandby({self.name}, {HOST}:{self._port}, of {self.primary.port}, running={self.running})"


class PgPair:
    """A primary and one streaming standby (``synchronous`` or not), in a fresh directory."""

    def __init__(self, synchronous: bool = True) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="leasecron-pgpair-"))
        self.primary: PgServer = PgServer(self.directory / "primary")
        self.standby: Optional[PgStandby] = None
        #: The primary a failover left behind (killed), until :meth:`rejoin` makes it a standby again.
        self.old_primary: Optional[PgServer] = None
        self.synchronous = synchronous
        self._generation = 0  # standbys made so far: each gets a directory and a name of its own
        #: The two servers' ports, the first standby's first (set by :meth:`start`): a failover or a
        #: rejoin keeps them, so :meth:`url` stays the same.
        self.ports: Tuple[int, int] = (0, 0)

    def start(self) -> "PgPair":
        """Start the primary and a standby of it, streaming (synchronously if asked)."""
        self.primary.start()
        self._add_standby(port=None)
        assert self.standby is not None
        self.ports = (self.standby.port, self.primary.port)
        return self

    def _add_standby(self, port: Optional[int]) -> None:
        self._generation += 1
        name = f"standby{self._generation}"
        self.standby = PgStandby(self.primary, self.directory / name, name, port=port)
        self.standby.start()
        self.make_synchronous(self.synchronous)

    def make_synchronous(self, synchronous: bool) -> None:
        """Name the standby in the primary's ``synchronous_standby_names`` (or empty it), and wait
        until the primary streams to it with that ``sync_state``."""
        assert self.standby is not None
        names = f'FIRST 1 ("{self.standby.name}")' if synchronous else ""
        self.synchronous = synchronous
        self.execute(self.primary, "ALTER SYSTEM SET synchronous_standby_names = %s", names)
        self.execute(self.primary, "SELECT pg_reload_conf()")
        wanted = ("streaming", "sync" if synchronous else "async")
        deadline = time.monotonic() + STREAM_TIMEOUT
        while self.standbys() != [(self.standby.name, *wanted)]:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{self.standby!r} not {wanted} within {STREAM_TIMEOUT} s: {self.standbys()}")
            time.sleep(POLL_INTERVAL)

    def standbys(self) -> List[Tuple[str, str, str]]:
        """(application_name, state, sync_state) of each standby the primary streams to."""
        rows = self.execute(self.primary, "SELECT application_name, state, sync_state FROM pg_stat_replication")
        return sorted((str(a), str(b), str(c)) for a, b, c in rows)

    @staticmethod
    def execute(server: PgServer, sql: str, *params: Any) -> List[Tuple[Any, ...]]:
        """Run ``sql`` on ``server`` (database ``postgres``, autocommit); its rows."""
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params or None)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def url(self, dbname: str = "postgres", *, primary_first: bool = False) -> str:
        """A multi-host URL of both servers with ``target_session_attrs=read-write``: it reaches the
        primary whichever it is. The same URL before and after a failover and a rejoin; the first
        standby's host comes first, unless ``primary_first`` (the first primary's)."""
        hosts = ",".join(f"{HOST}:{port}" for port in (self.ports[::-1] if primary_first else self.ports))
        return f"postgresql://{self.primary.user}@{hosts}/{dbname}?target_session_attrs=read-write"

    def kill_primary(self) -> None:
        """``kill -9`` the primary's processes (its port refuses connections from then on)."""
        self.primary.kill()

    def promote(self) -> None:
        """Promote the standby; it becomes :attr:`primary`, and the killed one :attr:`old_primary`."""
        assert self.standby is not None
        self.standby.promote()
        self.old_primary, self.primary, self.standby = self.primary, self.standby, None

    def rejoin(self) -> None:
        """Bring the old primary back, on its old port, as the new primary's standby (a fresh base
        backup: its own data may hold commits the new primary never had)."""
        old, self.old_primary = self.old_primary, None
        assert old is not None, "no failover to rejoin after"
        old.stop()
        shutil.rmtree(old.data, ignore_errors=True)
        self._add_standby(port=old.port)

    def stop(self) -> None:
        """Stop every server and remove the directory."""
        for server in (self.standby, self.primary, self.old_primary):
            if server is not None:
                server.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def available() -> bool:
    """Whether a pair can be started here (the PostgreSQL binaries, ``pg_basebackup`` among them)."""
    bin_dir = pg_bin_dir()
    return bin_dir is not None and os.access(bin_dir / "pg_basebackup", os.X_OK)
