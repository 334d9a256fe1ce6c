"""The ``leasecron dashboard`` command: the dashboard's pages (:mod:`leasecron.contrib.dashboard`)
served by a real WSGI server.

What costs nothing if it fails comes first: where it will listen (:func:`check_listen`: off
loopback it needs a password), before anything is imported or opened; then Flask (the
``dashboard`` extra, :data:`INSTALL_HINT`); then the store, opened without creating anything and
read once. Only then does it serve :func:`~leasecron.contrib.dashboard.create_app` until SIGTERM
or SIGINT: with gunicorn when it can be imported (:func:`serve_gunicorn`, one worker of
:data:`THREADS` threads), else with Werkzeug's threaded server (:func:`serve_werkzeug`).
``docs/dashboard.rst`` (The command) says what it prints and how it exits.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from contextlib import ExitStack
from types import FrameType
from typing import Any, Callable, Dict, Mapping, Optional

from ..errors import ConfigError
from ..stores import Store, open_store
from .targets import load_cron
from .commands import CommandError, reading
from .controls import creating_nothing

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "INSTALL_HINT",
    "PASSWORD_ENV",
    "THREADS",
    "add_arguments",
    "check_can_listen",
    "check_listen",
    "cmd_dashboard",
    "is_loopback",
    "password_from",
    "serve",
    "serve_gunicorn",
    "serve_werkzeug",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
#: The environment variable that holds the password when ``--password`` is not given.
PASSWORD_ENV = "LEASECRON_DASHBOARD_PASSWORD"
#: What installs the dashboard's dependencies.
INSTALL_HINT = "pip install 'leasecron[dashboard]'"
#: Threads of the one gunicorn worker.
THREADS = 4
#: How long gunicorn's worker may finish its requests after SIGTERM, in seconds.
GRACEFUL_S = 5

#: Called with the URL once the server listens.
Ready = Callable[[str], None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``leasecron dashboard`` (its URL and ``--app`` included)."""
    parser.add_argument(
        "url", nargs="?", metavar="URL", help="store URL, e.g. sqlite:///leasecron.db (default: the store of --app)"
    )
    parser.add_argument(
        "--app", metavar="module:attr",
        help="the LeaseCron (or Flask app with LeaseCronExtension) that registers the jobs: adds their schedules"
        " and next slots",
    )  # fmt: skip
    parser.add_argument(
        "--host", default=DEFAULT_HOST,
        help=f"address to listen on (default: {DEFAULT_HOST}); one that is not loopback requires a password",
    )  # fmt: skip
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT,
        help=f"port to listen on (default: {DEFAULT_PORT}; 0: a free port, named in the line printed)",
    )  # fmt: skip
    parser.add_argument(
        "--read-only", action="store_true", help="show no pause, resume or trigger forms, and refuse every action"
    )
    parser.add_argument(
        "--password", metavar="TEXT",
        help=f"require HTTP basic authentication with this password (any user name) on every page and endpoint;"
        f" default: ${PASSWORD_ENV}, which, unlike an argument, other users cannot see in the process list",
    )  # fmt: skip


def cmd_dashboard(args: argparse.Namespace) -> int:
    """``leasecron dashboard [URL] [--app module:attr] [--host H] [--port N] [--read-only] [--password TEXT]``."""
    password = password_from(args.password, os.environ)
    host = check_listen(args.host, args.port, password)
    create_app = _import_create_app()
    cron = load_cron(args.app, what="--app") if args.app else None
    if args.url is None and cron is None:
        raise ConfigError("give a store URL, or --app module:attr (whose LeaseCron names the store)")
    with ExitStack() as stack:
        if args.url is not None:
            store = open_store(args.url, create=False)
            stack.callback(store.close)
        else:
            assert cron is not None
            store = cron.store
        stack.enter_context(reading(store))  # for as long as it serves: it creates nothing
        with creating_nothing("dashboard"):
            store.jobs()  # a store without its schema is an error now, not an empty page
        app = create_app(store, cron=cron, read_only=args.read_only, password=password)
        serve(app, host, args.port, _describe(store, args.app, args.read_only, password))
    return 0


def password_from(option: Optional[str], environ: Mapping[str, str]) -> Optional[str]:
    """The password: ``--password``, else :data:`PASSWORD_ENV` (empty: none); None when neither is set."""
    if option is not None:
        if not option:
            raise ConfigError(f"--password must not be empty (leave it out, or unset {PASSWORD_ENV}, for none)")
        return option
    return environ.get(PASSWORD_ENV) or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_listen(host: str, port: int, password: Optional[str]) -> str:
    """Check ``--host`` and ``--port``; returns the host (IPv6 without brackets).

    Raises :class:`~leasecron.ConfigError` for an empty host, a port outside 0-65535, or a host
    that is not loopback without a password: the pages and their actions would be open to
    whoever reaches the address.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ConfigError(f"--host must be an address or a host name, e.g. {DEFAULT_HOST}")
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be 0-65535 (0: a free port), not {port}")
    if password is None and not is_loopback(host):
        raise ConfigError(
            f"--host {host} is not a loopback address, and the dashboard would be open to anyone who reaches it:"
            f" set {PASSWORD_ENV} (or give --password TEXT) to require HTTP basic authentication, or listen on"
            f" {DEFAULT_HOST}"
        )
    return host


def _import_create_app() -> Callable[..., Any]:
    """:func:`leasecron.contrib.dashboard.create_app`, or a ConfigError naming :data:`INSTALL_HINT`."""
    try:
        importlib.import_module("flask")
    except ImportError:
        raise ConfigError(f"the dashboard needs Flask, which is not installed: {INSTALL_HINT}") from None
    from ..contrib.dashboard import create_app

    return create_app


def _describe(store: Store, app: Optional[str], read_only: bool, password: Optional[str]) -> str:
    """What the started line says after the URL: the mode, the store (its repr hides passwords)."""
    parts = ["read-only" if read_only else "actions allowed"]
    parts.append("password required" if password is not None else "no password")
    parts.append(f"store {store!r}" + (f", jobs of {app}" if app is not None else ""))
    return "; ".join(parts)


def serve(app: Any, host: str, port: int, about: str) -> None:
    """Serve the WSGI ``app`` on ``host:port`` until SIGTERM or SIGINT: with gunicorn when it can be
    imported, else with Werkzeug's threaded server. Prints the started line (with ``about``) on
    stderr once it listens, and a last line once it stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_can_listen(host, port)

    def ready(url: str, server: str) -> None:
        print(f"leasecron dashboard on {url} ({about}; {server}); SIGTERM or Ctrl-C stops it", file=sys.stderr,
              flush=True)  # fmt: skip

    try:
        base: Any = importlib.import_module("gunicorn.app.base").BaseApplication
    except ImportError:  # not installed, or not on this system (gunicorn needs fcntl)
        serve_werkzeug(app, host, port, lambda url: ready(url, "Werkzeug's threaded server"))
    else:
        serve_gunicorn(base, app, host, port, lambda url: ready(url, f"gunicorn, 1 worker, {THREADS} threads"))
    print("leasecron dashboard stopped", file=sys.stderr, flush=True)


def check_can_listen(host: str, port: int) -> None:
    """Raise :class:`CommandError` when ``host:port`` cannot be listened on (a port in use, an address
    not of this host, a name that does not resolve): said at once, where gunicorn would retry for 5 s.

    A socket is bound and closed, as the servers bind theirs (``SO_REUSEADDR``: a port left in
    ``TIME_WAIT`` is free, one that a server listens on is not). Port 0 is always free.
    """
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise CommandError(f"cannot listen on {_url(host, port)}: {exc.strerror or exc}") from None


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve_gunicorn(base: Any, app: Any, host: str, port: int, ready: Ready) -> None:
    """Run gunicorn's arbiter (``base``: ``gunicorn.app.base.BaseApplication``) with ``app`` until
    SIGTERM (graceful) or SIGINT (quick); returns in the master once it stopped.

    The worker is forked from this process and gunicorn ends it with ``sys.exit``: that
    ``SystemExit`` goes on in the worker; in the master, an exit code other than 0 (a worker that
    could not boot, a port in use) becomes a :class:`CommandError`.
    """
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def when_ready(server: Any) -> None:
        listen_host, listen_port = server.LISTENERS[0].sock.getsockname()[:2]
        ready(_url(listen_host, listen_port))

    settings: Dict[str, Any] = {
        "bind": [bind],
        "workers": 1,
        "worker_class": "gthread",
        "threads": THREADS,
        "graceful_timeout": GRACEFUL_S,
        "proc_name": "leasecron-dashboard",
        "loglevel": "warning",
        "accesslog": None,
        "control_socket_disable": True,  # gunicorn >= 25.1 opens one under $HOME otherwise
        "when_ready": when_ready,
    }

    class Server(base):  # type: ignore[misc]  # gunicorn has no types
        def load_config(self) -> None:
            for key, value in settings.items():
                if key in self.cfg.settings:  # an older gunicorn lacks the newer settings
                    self.cfg.set(key, value)

        def load(self) -> Any:
            return app

    master = os.getpid()
    try:
        Server().run()
    except SystemExit as exc:
        if os.getpid() != master:
            raise  # the worker's end
        if exc.code not in (0, None):
            raise CommandError(f"gunicorn stopped with exit code {exc.code} (its log above says why)") from None


def serve_werkzeug(app: Any, host: str, port: int, ready: Ready) -> None:
    """Serve ``app`` with Werkzeug's threaded server until SIGTERM or SIGINT (either stops it at once,
    letting no new request in; the previous handlers are restored)."""
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request: the pages refresh themselves
    server = make_server(host, port, app, threaded=True)

    def stop(signum: int, frame: Optional[FrameType]) -> None:
        # shutdown() waits for serve_forever's loop, which runs in this (the main) thread: not here
        threading.Thread(target=server.shutdown, name="dashboard-stop", daemon=True).start()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        ready(_url(host, server.server_port))
        server.serve_forever()
    finally:
        server.server_close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
