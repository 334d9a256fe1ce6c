"""A replicated Redis or Valkey the tests start themselves: a primary, its replicas, and Sentinels.

:class:`Sentinel` is one ``redis-server --sentinel`` (or ``valkey-server --sentinel``) process;
:class:`Replicated` a primary with ``replicas`` replicas (``--replicaof``) and ``sentinels``
Sentinels watching it as the service :data:`SERVICE`, with ``down-after-milliseconds`` of
:data:`DOWN_AFTER_MS`, so that a primary killed is replaced within a few seconds. Everything
listens on 127.0.0.1, on free ports; every wait is a poll loop with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence, Set, Tuple

import redis

from tests.servers import HOST, POLL_INTERVAL, START_TIMEOUT, Server, ServerProcess, _Started, free_port

#: The name the Sentinels know the primary by.
SERVICE = "leasecron"
#: How long a Sentinel waits before it thinks the primary down.
DOWN_AFTER_MS = 1_000
#: How long a failover may take before the Sentinels try another.
FAILOVER_TIMEOUT_MS = 5_000
#: How long a test waits for a topology to form or a failover to end, in seconds.
SETTLE_TIMEOUT = 30.0


class Sentinel(ServerProcess):
    """One Sentinel on 127.0.0.1 watching the primary at ``primary_port`` (quorum ``quorum``)."""

    LOG_NAME = "sentinel.log"
    SILENT = "no PONG"

    def __init__(self, binary: str, directory: Path, primary_port: int, quorum: int, password: str = "") -> None:
        self.binary = binary
        self.directory = Path(directory)
        self.primary_port = primary_port
        self.quorum = quorum
        self.password = password
        self._port_given = False
        self._port = free_port()
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._started_once = False

    def _config(self) -> str:
        lines = [
            f"port {self._port}",
            f"bind {HOST}",
            f"dir {self.directory}",
            "protected-mode no",
            f"logfile {self.logfile}",
            f"sentinel monitor {SERVICE} {HOST} {self.primary_port} {self.quorum}",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        if self.password:
            lines.append(f"requirepass {self.password}")
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Write the Sentinel's config (it rewrites it as it learns) and launch it until it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "sentinel.conf").write_text(self._config(), encoding="utf-8")
        self._start_until_it_answers(time.monotonic() + timeout, timeout, "sentinel")

    def _launch(self) -> "subprocess.Popen[bytes]":
        command = [self.binary, str(self.directory / "sentinel.conf"), "--sentinel", "--daemonize", "no"]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _answers(self) -> bool:
        try:
            with self.client(socket_timeout=1.0) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client of this Sentinel (the caller closes it)."""
        return redis.Redis(host=HOST, port=self._port, password=self.password or None, **kwargs)


class Replicated(_Started):
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority of them)."""

    def __init__(
        self,
        binary: str,
        directory: Path,
        *,
        replicas: int = 2,
        sentinels: int = 3,
        sentinel_password: str = "",
        appendonly: bool = False,
        server_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary
        self.directory = Path(directory)
        self.sentinel_password = sentinel_password
        #: More command-line arguments of every data server (say, ``--repl-diskless-sync-delay 0``).
        self.server_args = list(server_args)
        first = free_port()
        #: Every data server, the first one the primary at start.
        self.servers: List[Server] = [
            Server(binary, self.directory / "server0", port=first, appendonly=appendonly, args=self.server_args)
        ] + [
            Server(
                binary, self.directory / f"server{i}", appendonly=appendonly,
                args=[*self.server_args, "--replicaof", HOST, str(first)],
            )  # fmt: skip
            for i in range(1, replicas + 1)
        ]
        quorum = sentinels // 2 + 1
        self.sentinels: List[Sentinel] = [
            Sentinel(binary, self.directory / f"sentinel{i}", first, quorum, sentinel_password)
            for i in range(sentinels)
        ]

    def url(self, scheme: str = "redis+sentinel", query: str = "") -> str:
        """The Sentinel URL of the service: every Sentinel, database 0."""
        hosts = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"{scheme}://{hosts}/{SERVICE}/0" + (f"?{query}" if query else "")

    def start(self, timeout: float = SETTLE_TIMEOUT) -> None:
        """Start the servers and the Sentinels, and wait until every replica streams from the
        primary and every Sentinel knows the replicas and the other Sentinels."""
        deadline = time.monotonic() + timeout
        try:
            for server in self.servers:
                server.start()
            for sentinel in self.sentinels:
                sentinel.start()
            self.wait_settled(deadline)
        except BaseException:
            self.stop()
            raise

    def primary(self) -> Server:
        """The data server a Sentinel names the primary now."""
        with self.sentinels[0].client(socket_timeout=2.0) as client:
            host, port = client.sentinel_get_master_addr_by_name(SERVICE)
        return self.server_at(int(port))

    def server_at(self, port: int) -> Server:
        """The data server listening on ``port``."""
        return next(server for server in self.servers if server.port == port)

    def replicas_streaming(self, server: Server) -> int:
        """How many replicas stream from ``server`` now (state ``online``)."""
        with server.client(socket_timeout=2.0) as client:
            info = client.info("replication")
        return sum(1 for key, value in info.items() if key.startswith("slave") and value.get("state") == "online")

    def wait_settled(self, deadline: float, replicas: Optional[int] = None) -> None:
        """Until ``deadline``: the primary has ``replicas`` (default: every other running server)
        streaming, and every running Sentinel names it and knows as many replicas and every other
        Sentinel. RuntimeError saying what is missing otherwise."""
        while True:
            problem = self._unsettled(replicas)
            if problem is None:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"replicated topology not settled: {problem}")
            time.sleep(POLL_INTERVAL * 5)

    def _unsettled(self, replicas: Optional[int]) -> Optional[str]:
        try:
            primary = self.primary()
            wanted = sum(1 for s in self.servers if s.running) - 1 if replicas is None else replicas
            streaming = self.replicas_streaming(primary)
            if streaming < wanted:
                return f"{streaming} of {wanted} replicas stream from {primary.port}"
            running = [s for s in self.sentinels if s.running]
            for sentinel in running:
                with sentinel.client(socket_timeout=2.0) as client:
                    _, port = client.sentinel_get_master_addr_by_name(SERVICE)
                    if int(port) != primary.port:
                        return f"sentinel {sentinel.port} names {port} the primary, not {primary.port}"
                    state = client.sentinel_master(SERVICE)  # a failover ends once every replica follows
                    if int(state["port"]) != primary.port or "failover_in_progress" in str(state["flags"]):
                        return f"sentinel {sentinel.port} is still failing over to {primary.port}"
                    known = [r for r in client.sentinel_slaves(SERVICE) if "s_down" not in r["flags"]]
                    others = client.sentinel_sentinels(SERVICE)
                if len(known) < wanted or len(others) < len(running) - 1:
                    return f"sentinel {sentinel.port} knows {len(known)} replicas and {len(others)} sentinels"
        except (redis.RedisError, StopIteration, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def kill_primary(self) -> Server:
        """SIGKILL the primary; the server killed."""
        primary = self.primary()
        primary.kill()
        return primary

    def freeze_primary(self) -> Tuple[Server, int]:
        """SIGSTOP the primary (it holds its connections open and answers nothing); the server and its pid."""
        primary = self.primary()
        assert primary._process is not None
        os.kill(primary._process.pid, signal.SIGSTOP)
        return primary, primary._process.pid

    def wait_failover(self, old: Server, timeout: float = SETTLE_TIMEOUT) -> Server:
        """Until every running Sentinel names a primary other than ``old``: the new one."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                ports = self.named_primaries()
                if len(ports) == 1 and old.port not in ports:
                    return self.server_at(ports.pop())
            except redis.RedisError:
                pass
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no failover from {old.port} within {timeout} s")
            time.sleep(POLL_INTERVAL * 5)

    def named_primaries(self, timeout: float = 2.0) -> Set[int]:
        """The ports of the primaries the running Sentinels name now (one when they agree);
        redis.RedisError when one does not answer within ``timeout`` s."""
        ports = set()
        for sentinel in self.sentinels:
            if sentinel.running:
                with sentinel.client(socket_timeout=timeout) as client:
                    ports.add(int(client.sentinel_get_master_addr_by_name(SERVICE)[1]))
        return ports

    def settled(self) -> bool:
        """Whether the topology is settled now (:meth:`wait_settled`'s condition, checked once)."""
        return self._unsettled(None) is None

    def rejoin(self, old: Server) -> None:
        """Start ``old`` again as a replica of the primary now (as an operator or Sentinel would)."""
        primary = self.primary()
        old.args = [*self.server_args, "--replicaof", HOST, str(primary.port)]
        old.start()

    def stop(self) -> None:
        """Stop every Sentinel and server (a frozen one is woken first)."""
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            if server._process is not None and server._process.poll() is None:
                os.kill(server._process.pid, signal.SIGCONT)
            server.stop()

    @property
    def running(self) -> bool:
        """Whether any process of the topology is alive."""
        return any(s.running for s in self.servers) or any(s.running for s in self.sentinels)

    def __repr__(self) -> str:
        return f"Replicated({Path(self.binary).name}, servers={[s.port for s in self.servers]})"
