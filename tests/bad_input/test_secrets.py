"""No password in any message (issue 12, item 4).

A password given in a store URL (its user part, a ``password=`` query parameter) or in a libpq
``key=value`` DSN is fed through every path that can show the URL or an error about it:
``open_store``'s errors (unknown scheme, a malformed URL, each backend's bad options), a store's
first operation against a server that is not there or refuses the credentials, the stores'
``repr`` and the engine's start log line, and the ``leasecron`` commands. The password never
appears; where the URL is shown, it is shown masked (``***``). Every target is a loopback address.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from leasecron import ConfigError, LeaseCron, LeaseCronError, StoreError, open_store
from leasecron.stores.urls import masked_url, without_secrets
from tests import servers
from tests.cli_support import Process, environment
from tests.conftest import SERVERS
from tests.engine.support import HOURLY
from tests.test_read_only import pg_address, pg_schema  # noqa: F401 - pg_schema: a fixture the tests request

PASSWORD = "s3cret-Pa55word"


def _clean(text: str, shown: bool = True) -> None:
    """``text`` holds no part of the password, and (``shown``) shows the URL masked."""
    assert PASSWORD not in text and "Pa55word" not in text, text
    if shown:
        assert "***" in text, text


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A loopback port nothing listens on."""
    return servers.free_port()


# -- open_store: every ConfigError ------------------------------------------------------------

#: URL (from the test's directory) -> the ConfigError open_store raises, none of which connects.
CONFIG_ERRORS: Dict[str, Callable[[Path], str]] = {
    "unknown scheme": lambda d: f"mysql://user:{PASSWORD}@127.0.0.1/app",
    "unknown scheme, query password": lambda d: f"mysql://127.0.0.1/app?password={PASSWORD}",
    "no scheme": lambda d: f"user:{PASSWORD}@127.0.0.1/app",
    "a libpq DSN for a URL": lambda d: f"host=127.0.0.1 password={PASSWORD} dbname=app",
    "a bad IPv6 host": lambda d: f"redis://user:{PASSWORD}@[::1/0",
    "sqlite with a host part": lambda d: f"sqlite://user:{PASSWORD}@localhost/{d / 'x.db'}",
    "sqlite without a file": lambda d: f"sqlite:///?password={PASSWORD}",
    "sqlite bad busy_timeout_ms": lambda d: f"sqlite:///{d / 'x.db'}?busy_timeout_ms=soon&password={PASSWORD}",
    "sqlite unknown option": lambda d: f"sqlite:///{d / 'x.db'}?password={PASSWORD}",
    "redis bad database": lambda d: f"redis://:{PASSWORD}@127.0.0.1:6379/zero",
    "redis bad database, query password": lambda d: f"redis://127.0.0.1:6379/zero?password={PASSWORD}",
    "redis bad cluster value": lambda d: f"redis://:{PASSWORD}@127.0.0.1:6379/0?cluster=maybe",
    "redis bad port": lambda d: f"valkey://user:{PASSWORD}@127.0.0.1:notaport/0",
    "redis password with an unescaped slash": lambda d: f"redis://:{PASSWORD}/x@127.0.0.1:6379/0",
    "postgres bad max_connections": lambda d: f"postgresql://u:{PASSWORD}@127.0.0.1:5432/app?max_connections=many",
    "postgres bad timeout": lambda d: f"postgresql://127.0.0.1:5432/app?password={PASSWORD}&timeout=soon",
    "postgres bad port": lambda d: f"postgresql://u:{PASSWORD}@127.0.0.1:99999/app",
    "postgres bad percent-encoding": lambda d: f"postgres://u:{PASSWORD}%zz@127.0.0.1:5432/app",
}


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_open_store_config_errors_mask_the_password(case: str, tmp_path: Path) -> None:
    """Each way open_store refuses a URL: ConfigError, its message showing the URL masked, and no
    part of the password (libpq quotes a token it cannot decode; urllib a port it cannot read)."""
    url = CONFIG_ERRORS[case](tmp_path)
    try:
        with pytest.raises(ConfigError) as info:
            open_store(url)
    finally:
        assert not list(tmp_path.iterdir())  # nothing was opened
    _clean(str(info.value))


# -- a store's first operation: nobody listens, wrong credentials ------------------------------


def _unreachable(port: int) -> Dict[str, str]:
    return {
        "redis": f"redis://:{PASSWORD}@127.0.0.1:{port}/0",
        "valkey with user": f"valkey://someone:{PASSWORD}@127.0.0.1:{port}/0",
        "redis query password": f"redis://127.0.0.1:{port}/0?password={PASSWORD}",
        "redis cluster": f"redis://:{PASSWORD}@127.0.0.1:{port}/0?cluster=true",
        "postgres": f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/app?connect_timeout=2",
        "postgres query password": f"postgresql://127.0.0.1:{port}/app?password={PASSWORD}",
        "postgres bad libpq option": f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/app?sslmode=bogus",
    }


def _first_operation_error(url: str) -> str:
    """The message of the StoreError the first operation of ``url``'s store raises (or opening it)."""
    with pytest.raises(StoreError) as info:
        store = open_store(url)
        try:
            _clean(repr(store))
            store.now_ms()
        finally:
            store.close()
    return str(info.value)


@pytest.mark.parametrize("case", ["redis", "valkey with user", "redis query password", "redis cluster",
                                  "postgres", "postgres query password", "postgres bad libpq option"])  # fmt: skip
def test_an_unreachable_server_never_shows_the_password(case: str, closed_port: int) -> None:
    """A store whose server does not listen (or whose libpq option libpq reads when connecting):
    StoreError (a cluster at once, from open_store: it was a bare RedisClusterException), without
    the password."""
    message = _first_operation_error(_unreachable(closed_port)[case])
    _clean(message, shown=case == "redis cluster")


def test_a_libpq_dsn_with_a_password_never_shows_it(closed_port: int) -> None:
    """PostgresStore("host=... password=..."): its repr and its connection error mask the password."""
    from leasecron.stores.postgres import PostgresStore

    for dsn in (f"host=127.0.0.1 port={closed_port} password={PASSWORD} dbname=app",
                f"host=127.0.0.1 port={closed_port} password = '{PASSWORD} x' dbname=app"):  # fmt: skip
        store = PostgresStore(dsn)
        try:
            _clean(repr(store))
            with pytest.raises(StoreError) as info:
                store.now_ms()
            _clean(str(info.value), shown=False)
        finally:
            store.close()
    with pytest.raises(ConfigError) as bad:
        PostgresStore(f"host=127.0.0.1 port=notaport password={PASSWORD}")
    _clean(str(bad.value))


def test_wrong_credentials_never_show_the_password() -> None:
    """A Redis user and a PostgreSQL role that do not exist: "authentication failed", no password."""
    host, port = SERVERS.redis()
    for url in (f"redis://nosuchuser:{PASSWORD}@{host}:{port}/0", f"postgresql://nosuchrole:{PASSWORD}@{pg_address()}"):
        message = _first_operation_error(url)
        assert "authentication failed" in message, message
        _clean(message, shown=False)


# -- repr and the start log line ---------------------------------------------------------------


def test_the_stores_repr_masks_the_password() -> None:
    """RedisStore and PostgresStore show their URL (or DSN) with the password masked, in their
    user part and in a query parameter; the user, host, port and the other options stay."""
    from leasecron.stores.postgres import PostgresStore

    cases = {
        f"redis://bob:{PASSWORD}@127.0.0.1:6379/0?prefix=p": "redis://bob:***@127.0.0.1:6379/0?prefix=p",
        f"valkey://127.0.0.1:6379/0?password={PASSWORD}": "valkey://127.0.0.1:6379/0?password=***",
        f"postgresql://bob:{PASSWORD}@127.0.0.1:5432/app?sslpassword={PASSWORD}&sslmode=disable":
            "postgresql://bob:***@127.0.0.1:5432/app?sslpassword=***&sslmode=disable",
    }  # fmt: skip
    for url, shown in cases.items():
        store = open_store(url)
        try:
            assert shown in repr(store), repr(store)
            _clean(repr(store))
        finally:
            store.close()
    direct = PostgresStore(f"postgresql://bob:{PASSWORD}@127.0.0.1:5432/app")
    assert "postgresql://bob:***@127.0.0.1:5432/app" in repr(direct)
    direct.close()


def test_the_start_log_line_masks_the_password(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """LeaseCron.start() logs its store's repr: masked (the trust-authenticated server ignores the password)."""
    schema = request.getfixturevalue("pg_schema")
    caplog.set_level(logging.INFO, logger="leasecron")
    cron = LeaseCron(f"postgresql://{pg_address()}?schema={schema}&password={PASSWORD}", runner="r", jitter_ms=0)
    cron.add_job(lambda: None, HOURLY, name="job")
    _clean(repr(cron))
    try:
        cron.start()
    finally:
        cron.stop(timeout=5)
        cron.store.close()
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "starting runner" in text
    _clean(text)


# -- the masking itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, shown",
    [
        ("redis://user:pw@host:6379/0?password=pw2&prefix=p", "redis://user:***@host:6379/0?password=***&prefix=p"),
        ("redis://:pw@host", "redis://:***@host"),
        ("redis://user@host/0", "redis://user@host/0"),
        ("redis://:p/w?x#y@host:6379/0", "redis://:***@host:6379/0"),
        ("sqlite:////data/a:b@c.db", "sqlite:////data/a:b@c.db"),
        ("postgresql://h/db?PassWord=x&sslpassword=y", "postgresql://h/db?PassWord=***&sslpassword=***"),
        ("host=h password='a b\\' c' dbname=d", "host=h password=*** dbname=d"),
        ("host=h password = pw", "host=h password = ***"),
        ("redis:/user:pw@host", "redis:/user:***@host"),
        ("memory://", "memory://"),
    ],
)
def test_masked_url(url: str, shown: str) -> None:
    """masked_url masks the user part's password (a password with an unescaped / ? or # up to the
    URL's last @), every password-like query parameter and a DSN's password keyword; nothing else."""
    assert masked_url(url) == shown


def test_without_secrets_removes_the_password_as_written_and_decoded() -> None:
    """A driver's message may quote the password raw, decoded or in pieces: each is masked."""
    url = "postgresql://u:pa%40ss/wd@h/db"
    assert without_secrets('token "pa%40ss/wd", user pa@ss, port pa%40ss', url) == 'token "***", user ***, port ***'


# -- the leasecron command -----------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leasecron", *args], capture_output=True, text=True, timeout=60)


def _cli_urls(tmp_path: Path, port: int) -> Dict[str, str]:
    return {
        "unknown scheme": CONFIG_ERRORS["unknown scheme"](tmp_path),
        "sqlite with a host part": CONFIG_ERRORS["sqlite with a host part"](tmp_path),
        "postgres bad percent-encoding": CONFIG_ERRORS["postgres bad percent-encoding"](tmp_path),
        "redis unreachable": _unreachable(port)["redis"],
        "redis cluster unreachable": _unreachable(port)["redis cluster"],
        "postgres unreachable": _unreachable(port)["postgres"],
        "postgres unknown role": f"postgresql://nosuchrole:{PASSWORD}@{pg_address()}",
    }


#: Each command that takes a store URL, and its arguments after the URL.
URL_COMMANDS = {
    "check": [], "runs": [], "jobs": [], "show": ["job", "0"], "pause": ["job", "--note", "why"],
    "resume": ["job"], "trigger": ["job", "--wait", "--timeout", "5"],
}  # fmt: skip


@pytest.mark.processes
@pytest.mark.parametrize("command", list(URL_COMMANDS))
def test_commands_never_show_the_password(command: str, tmp_path: Path, closed_port: int) -> None:
    """`leasecron check|runs|jobs|show|pause|resume|trigger URL ...` with a bad URL, a server that
    is not there or a role that does not exist: exit 1 or 2 with one line on stderr, no traceback,
    no password."""
    for case, url in _cli_urls(tmp_path, closed_port).items():
        result = _cli(command, url, *URL_COMMANDS[command])
        assert result.returncode in (1, 2), (case, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, (case, result.stderr)
        _clean(result.stdout + result.stderr, shown=False)
        if case in ("unknown scheme", "sqlite with a host part", "postgres bad percent-encoding"):
            assert "***" in result.stderr, (case, result.stderr)
    assert not list(tmp_path.iterdir())


@pytest.mark.processes
def test_demo_never_shows_the_password(closed_port: int) -> None:
    """`leasecron demo --store URL` with a server that is not there: exit 1, no password."""
    result = _cli("demo", "--seconds", "1", "--store", _unreachable(closed_port)["redis"])
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    _clean(result.stdout + result.stderr, shown=False)


RUN_MODULE = """
import os
import leasecron

cron = leasecron.LeaseCron(os.environ["LEASECRON_STORE"], runner="secret-run", jitter_ms=0)


@cron.job("0 0 1 1 *", name="yearly")
def yearly():
    pass
"""


@pytest.mark.processes
def test_run_never_shows_the_password(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`leasecron run module:cron`: its own line and the engine's log show the store masked."""
    schema = request.getfixturevalue("pg_schema")
    (tmp_path / "secretmod.py").write_text(textwrap.dedent(RUN_MODULE))
    url = f"postgresql://{pg_address()}?schema={schema}&password={PASSWORD}"
    proc = Process(["-m", "leasecron", "run", "secretmod:cron"], tmp_path, environment(url))
    try:
        proc.wait_line(r"starting runner 'secret-run'")
        proc.signal()
        assert proc.finish() == 0, proc.stderr()
    finally:
        proc.kill()
    lines: List[str] = proc.stderr().splitlines()
    assert any("running secretmod:cron" in line and "***" in line for line in lines), lines
    _clean("\n".join(lines))


def test_flask_config_error_never_shows_the_password() -> None:
    """A Flask app's LEASECRON_STORE with an unknown scheme: the ConfigError masks the password."""
    from flask import Flask

    from leasecron.contrib.flask import LeaseCronExtension

    app = Flask("secrets")
    app.config["LEASECRON_STORE"] = f"mysql://user:{PASSWORD}@127.0.0.1/app"
    with pytest.raises(LeaseCronError) as info:
        LeaseCronExtension().init_app(app)
    _clean(str(info.value))



def test_demo_keeps_the_password_out_of_its_legend_and_its_workers_arguments(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    """`leasecron demo --store URL`: the legend shows the URL masked, and a worker gets the URL in
    its environment (LEASECRON_STORE), not in its arguments, which any user of the host can read."""
    from leasecron.cli.demo import Demo

    schema = request.getfixturevalue("pg_schema")
    demo = Demo(3.0, f"postgresql://{pg_address()}?schema={schema}&password={PASSWORD}", str(tmp_path))
    demo.legend()
    legend = capsys.readouterr().out
    assert "password=***" in legend
    _clean(legend)
    worker = demo.spawn()
    try:
        events = []
        while not events or events[-1].get("event") not in ("ready", "exit"):
            events.append(demo.events.get(timeout=30)[1])
        assert events[-1]["event"] == "ready", (events, Path(worker.stderr_path).read_text())
        arguments = Path(f"/proc/{worker.proc.pid}/cmdline").read_bytes().decode()
        assert "leasecron.cli.worker" in arguments and "--store" not in arguments
        _clean(arguments, shown=False)
    finally:
        worker.proc.terminate()
        worker.proc.wait(20)
