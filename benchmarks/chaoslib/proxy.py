"""A loopback TCP proxy with faults that can be switched on and off at run time.

One :class:`FaultyProxy` listens on ``127.0.0.1:<free port>`` and forwards every
connection to one store server (Redis, Valkey, PostgreSQL). The chaos harness
gives each worker instance a proxy of its own, so a fault hits one instance and
leaves the others alone:

* :meth:`~FaultyProxy.stall` / :meth:`~FaultyProxy.unstall`: bytes stop flowing,
  both ways, on every connection (old and new); what arrives meanwhile is kept,
  in order, and delivered on ``unstall``. A request the client gave up on
  still reaches the server late, as on a congested network; so does the
  client's hang-up, after it.
* :meth:`~FaultyProxy.set_latency`: every chunk read is delivered ``ms`` later
  (order kept).
* :meth:`~FaultyProxy.reset_all`: every live connection is closed with a TCP
  reset (``SO_LINGER`` 0) on both sides.
* :meth:`~FaultyProxy.blackhole`: connections are accepted but nothing is ever
  forwarded or answered: the bytes are dropped. On ``unstall`` every connection
  that lost bytes is reset (its stream is broken); new ones work again.
* :meth:`~FaultyProxy.drop_replies`: one way only: what clients send still
  reaches the server (which acts on it), but every byte the server sends back
  is dropped, as when a reply is lost after the server applied a request. On
  ``unstall`` (or ``restore``) every connection that lost bytes is reset; new
  ones work again.
* :meth:`~FaultyProxy.restore`: every fault off (stall, blackhole, dropped
  replies, latency).

The proxy is one thread running a :mod:`selectors` loop over non-blocking
sockets; the control methods are thread-safe and return once the loop took
them into account. :meth:`~FaultyProxy.stop` resets every connection, closes
the listener and joins the thread.
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, TypeVar

__all__ = ["FaultyProxy"]

HOST = "127.0.0.1"
#: Bytes read per recv().
CHUNK = 65_536
#: A direction stops reading while this much is buffered (a stall with a chatty peer).
MAX_BUFFERED = 8 * 1024 * 1024
#: The longest the loop sleeps without looking at the clock.
MAX_WAIT_S = 0.5
#: How long a control call waits for the loop to take it.
CONTROL_TIMEOUT_S = 10.0

_EOF = b""  # a queued end of stream (a real chunk is never empty)
_T = TypeVar("_T")


def _abort(sock: Optional[socket.socket]) -> None:
    """Close ``sock`` with a TCP reset (SO_LINGER on, timeout 0) instead of a FIN."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Direction:
    """The bytes on their way from one socket to the other, each chunk with its due time."""

    def __init__(self) -> None:
        self.queue: Deque[Tuple[float, bytes]] = deque()
        self.head_offset = 0  # bytes of the head chunk already sent
        self.buffered = 0
        self.last_due = 0.0
        self.eof_read = False  # the source said EOF (queued as _EOF)
        self.eof_sent = False  # the EOF was passed on (shutdown(SHUT_WR) of the destination)
        self.blocked = False  # the destination's send buffer is full: wait until it is writable

    def push(self, due: float, chunk: bytes) -> None:
        """Queue ``chunk`` (``_EOF`` for the end of stream) to be sent at ``due`` (monotonic s), in order."""
        due = max(due, self.last_due)  # later chunks never overtake earlier ones
        self.last_due = due
        self.queue.append((due, chunk))
        self.buffered += len(chunk)


class _Connection:
    """A client connection and its upstream connection."""

    def __init__(self, number: int, client: socket.socket, upstream: socket.socket) -> None:
        self.number = number
        self.client = client
        self.upstream = upstream
        self.connected = False  # the upstream connect completed
        self.up = _Direction()  # client -> upstream
        self.down = _Direction()  # upstream -> client
        self.lost_bytes = False  # some bytes were dropped (blackhole, drop_replies): the stream is broken
        self.closed = False

    def pairs(self) -> List[Tuple[socket.socket, socket.socket, _Direction]]:
        """(source, destination, direction) for both directions."""
        return [(self.client, self.upstream, self.up), (self.upstream, self.client, self.down)]


class FaultyProxy:
    """A TCP proxy from ``127.0.0.1:<port>`` to ``target_host:target_port`` with switchable faults."""

    def __init__(self, target_host: str, target_port: int, *, name: str = "proxy") -> None:
        self.target = (target_host, target_port)
        self.name = name
        self._listener: Optional[socket.socket] = None
        self._port = 0
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._controls: Deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._connections: Dict[int, _Connection] = {}
        self._by_socket: Dict[int, Tuple[_Connection, str]] = {}
        self._next_number = 0
        self._thread: Optional[threading.Thread] = None
        self._running = False
        self._stalled = False
        self._blackholed = False
        self._dropping_replies = False
        self._latency_s = 0.0
        #: Counters: accepted, refused (upstream connect failed), reset (by reset_all), bytes_up, bytes_down,
        #: dropped_down (server bytes dropped by drop_replies).
        self.stats: Dict[str, int] = dict.fromkeys(
            ("accepted", "refused", "reset", "bytes_up", "bytes_down", "dropped_down"), 0
        )

    # -- public face ---------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on (127.0.0.1)."""
        return self._port

    @property
    def stalled(self) -> bool:
        """Whether bytes are held back (stall) or dropped (blackhole)."""
        return self._stalled or self._blackholed

    @property
    def dropping_replies(self) -> bool:
        """Whether the server's bytes are dropped (drop_replies)."""
        return self._dropping_replies

    @property
    def latency_ms(self) -> int:
        """The delay added to every chunk, in milliseconds."""
        return int(round(self._latency_s * 1000))

    def start(self) -> "FaultyProxy":
        """Bind a free port of 127.0.0.1 and start forwarding; returns the proxy."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, 0))
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._port = int(listener.getsockname()[1])
        self._wake_r.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._running = True
        self._thread = threading.Thread(target=self._loop, name=f"{self.name}-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Reset every connection, close the listener and join the loop thread (idempotent)."""
        thread = self._thread
        if thread is None or not self._running:
            return
        self._running = False
        self._wake()
        thread.join(CONTROL_TIMEOUT_S)

    def __enter__(self) -> "FaultyProxy":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stall(self) -> None:
        """Hold every byte back, both ways, until :meth:`unstall` (they are kept and delivered then)."""
        self._control(lambda: setattr(self, "_stalled", True))

    def blackhole(self) -> None:
        """Accept connections but forward and answer nothing (bytes are dropped) until :meth:`unstall`."""
        self._control(lambda: setattr(self, "_blackholed", True))

    def drop_replies(self) -> None:
        """Drop every byte the server sends (clients' bytes still reach it) until :meth:`unstall`."""
        self._control(lambda: setattr(self, "_dropping_replies", True))

    def unstall(self) -> None:
        """End a stall (deliver what was held back), a blackhole or dropped replies (reset the
        connections that lost bytes)."""

        def apply() -> None:
            self._stalled = False
            if self._blackholed or self._dropping_replies:
                self._blackholed = self._dropping_replies = False
                for conn in list(self._connections.values()):
                    if conn.lost_bytes:
                        self._close(conn, reset=True)

        self._control(apply)

    def restore(self) -> None:
        """Switch every fault off: :meth:`unstall`, and no latency."""
        self.unstall()
        self.set_latency(0)

    def set_latency(self, ms: float) -> None:
        """Deliver every chunk read from now on ``ms`` milliseconds late (0: no delay)."""
        if ms < 0:
            raise ValueError(f"latency must be >= 0 ms, not {ms}")
        self._control(lambda: setattr(self, "_latency_s", ms / 1000.0))

    def reset_all(self) -> int:
        """Close every live connection with a TCP reset on both sides; how many there were."""

        def apply() -> int:
            conns = list(self._connections.values())
            for conn in conns:
                self._close(conn, reset=True)
            self.stats["reset"] += len(conns)
            return len(conns)

        return self._control(apply)

    def connection_count(self) -> int:
        """How many client connections are open right now."""
        return self._control(lambda: len(self._connections))

    def __repr__(self) -> str:
        switches = (("stalled", self._stalled), ("blackholed", self._blackholed))
        faults = [f for f, on in (*switches, ("dropping replies", self._dropping_replies)) if on]
        if self._latency_s:
            faults.append(f"latency={self.latency_ms}ms")
        return f"FaultyProxy({self.name}, {HOST}:{self._port} -> {self.target[0]}:{self.target[1]}, {faults or 'ok'})"

    # -- control -------------------------------------------------------------------

    def _control(self, action: Callable[[], _T]) -> _T:
        """Run ``action`` in the loop thread and return its result (directly when not started)."""
        if self._thread is None or not self._running or threading.current_thread() is self._thread:
            return action()
        done = threading.Event()
        box: Dict[str, Any] = {}

        def call() -> None:
            try:
                box["result"] = action()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc
            finally:
                done.set()

        with self._lock:
            self._controls.append(call)
        self._wake()
        if not done.wait(CONTROL_TIMEOUT_S):
            raise RuntimeError(f"{self.name}: the proxy loop did not answer within {CONTROL_TIMEOUT_S} s")
        if "error" in box:
            raise box["error"]
        return box["result"]  # type: ignore[no-any-return]

    def _wake(self) -> None:
        """Wake the loop up from another thread (a byte on the wake-up socket)."""
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or shutting down

    # -- the loop ------------------------------------------------------------------

    def _loop(self) -> None:
        """The proxy thread: wait for sockets and due chunks, run control calls, send; reset all at the end."""
        try:
            while self._running:
                for key, mask in self._selector.select(self._wait_time()):
                    self._dispatch(key, mask)
                self._run_controls()
                self._flush_all()
        finally:
            for conn in list(self._connections.values()):
                self._close(conn, reset=True)
            self._run_controls()  # release callers waiting on a control
            for sock in (self._listener, self._wake_r, self._wake_w):
                if sock is not None:
                    sock.close()
            self._selector.close()

    def _run_controls(self) -> None:
        """Run the control calls queued by other threads, in order."""
        while True:
            with self._lock:
                if not self._controls:
                    return
                call = self._controls.popleft()
            call()

    def _wait_time(self) -> float:
        """Until the next queued chunk is due (or MAX_WAIT_S)."""
        if self._stalled or self._blackholed:
            return MAX_WAIT_S
        now = time.monotonic()
        wait = MAX_WAIT_S
        for conn in self._connections.values():
            for direction in (conn.up, conn.down):
                if direction.queue:
                    wait = min(wait, max(0.0, direction.queue[0][0] - now))
        return wait

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        """Handle one ready socket: the listener, the wake-up socket, or a side of a connection."""
        if key.data == "accept":
            self._accept()
            return
        if key.data == "wake":
            try:
                while self._wake_r.recv(4096):
                    pass
            except (BlockingIOError, OSError):
                pass
            return
        entry = self._by_socket.get(key.fd)
        if entry is None:
            return
        conn, side = entry
        if side == "upstream" and not conn.connected:
            if mask & selectors.EVENT_WRITE:
                self._finish_connect(conn)
            return
        if mask & selectors.EVENT_READ:
            self._read(conn, side)
        # EVENT_WRITE: _flush_all, after every event, sends what is due.

    def _accept(self) -> None:
        """Accept every pending client and start its non-blocking connect upstream."""
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._next_number += 1
            conn = _Connection(self._next_number, client, upstream)
            self._connections[conn.number] = conn
            self._by_socket[client.fileno()] = (conn, "client")
            self._by_socket[upstream.fileno()] = (conn, "upstream")
            self.stats["accepted"] += 1
            self._selector.register(client, selectors.EVENT_READ, "conn")
            code = upstream.connect_ex(self.target)
            if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                self.stats["refused"] += 1
                self._close(conn, reset=True)
                continue
            self._selector.register(upstream, selectors.EVENT_WRITE, "conn")

    def _finish_connect(self, conn: _Connection) -> None:
        """The upstream connect ended: reset the client if it failed, else start reading upstream."""
        code = conn.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code != 0:
            self.stats["refused"] += 1
            self._close(conn, reset=True)
            return
        conn.connected = True
        self._selector.modify(conn.upstream, selectors.EVENT_READ, "conn")

    def _read(self, conn: _Connection, side: str) -> None:
        """Read one chunk from a side and queue it for the other (dropped in a blackhole, and the
        server's while replies are dropped)."""
        source = conn.client if side == "client" else conn.upstream
        direction = conn.up if side == "client" else conn.down
        try:
            chunk = source.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, reset=True)  # the peer reset: pass the reset on
            return
        if self._blackholed or (self._dropping_replies and side == "upstream"):
            if not chunk:
                self._close(conn, reset=True)
                return
            conn.lost_bytes = True
            if not self._blackholed:
                self.stats["dropped_down"] += len(chunk)
            return
        self.stats["bytes_up" if side == "client" else "bytes_down"] += len(chunk)
        direction.push(time.monotonic() + self._latency_s, chunk)
        if not chunk:
            direction.eof_read = True
        self._update_interest(conn)

    def _update_interest(self, conn: _Connection) -> None:
        """Read from a socket unless its direction saw EOF or is full; write while a send is pending."""
        if conn.closed:
            return
        for source, _destination, direction in conn.pairs():
            if source is conn.upstream and not conn.connected:
                continue
            mask = 0
            if not direction.eof_read and direction.buffered < MAX_BUFFERED:
                mask |= selectors.EVENT_READ
            reverse = conn.down if source is conn.client else conn.up
            if reverse.blocked:
                mask |= selectors.EVENT_WRITE
            self._set_mask(source, mask)

    def _set_mask(self, sock: socket.socket, mask: int) -> None:
        """Register, modify or unregister ``sock`` so that it is watched for exactly ``mask``."""
        try:
            current = self._selector.get_key(sock).events
        except KeyError:
            current = 0
        if mask == current:
            return
        if mask == 0:
            self._selector.unregister(sock)
        elif current == 0:
            self._selector.register(sock, mask, "conn")
        else:
            self._selector.modify(sock, mask, "conn")

    def _flush_all(self) -> None:
        """Send every due chunk of every connection (nothing while stalled); close the finished ones."""
        if self._stalled or self._blackholed:
            return
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if not conn.connected or conn.closed:
                continue
            for _source, destination, direction in conn.pairs():
                if conn.closed:
                    break
                self._flush(conn, destination, direction, now)
            if not conn.closed:
                if conn.up.eof_sent and conn.down.eof_sent:
                    self._close(conn, reset=False)
                else:
                    self._update_interest(conn)

    def _flush(self, conn: _Connection, destination: socket.socket, direction: _Direction, now: float) -> None:
        """Send the due chunks of ``direction`` to ``destination`` until the socket is full."""
        direction.blocked = False
        while direction.queue and direction.queue[0][0] <= now:
            _due, chunk = direction.queue[0]
            if chunk == _EOF:
                direction.queue.popleft()
                direction.eof_sent = True
                try:
                    destination.shutdown(socket.SHUT_WR)
                except OSError:
                    self._close(conn, reset=True)
                return
            try:
                sent = destination.send(chunk[direction.head_offset :])
            except (BlockingIOError, InterruptedError):
                direction.blocked = True
                return
            except OSError:
                self._close(conn, reset=True)
                return
            direction.head_offset += sent
            if direction.head_offset < len(chunk):
                direction.blocked = True
                return
            direction.queue.popleft()
            direction.buffered -= len(chunk)
            direction.head_offset = 0

    def _close(self, conn: _Connection, *, reset: bool) -> None:
        """Forget the connection and close both sockets (with a reset when ``reset``)."""
        if conn.closed:
            return
        conn.closed = True
        self._connections.pop(conn.number, None)
        for sock in (conn.client, conn.upstream):
            try:
                self._by_socket.pop(sock.fileno(), None)
                self._selector.unregister(sock)
            except (KeyError, ValueError, OSError):
                pass
            if reset:
                _abort(sock)
            else:
                sock.close()
