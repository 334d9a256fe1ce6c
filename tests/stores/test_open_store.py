"""open_store: a URL names the store class; a bad URL or a missing client says what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import leasecron
from leasecron import ConfigError, MemoryStore, SQLiteStore
from leasecron.stores import require


def test_memory_url_opens_a_memory_store() -> None:
    """memory:// opens a MemoryStore."""
    store = leasecron.open_store("memory://")
    try:
        assert type(store) is MemoryStore
        assert isinstance(store, leasecron.Store)
    finally:
        store.close()


@pytest.mark.parametrize("form", ["absolute", "relative"])
def test_sqlite_url_opens_a_sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """sqlite:///relative.db and sqlite:////abs/path.db open a SQLiteStore on that file."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'a.db'}" if form == "absolute" else "sqlite:///a.db"
    store = leasecron.open_store(url)
    try:
        assert type(store) is SQLiteStore
        assert isinstance(store, leasecron.Store)
        slot = store.now_ms() - 1_000
        assert store.claim("job", slot, runner="r").won
    finally:
        store.close()
    assert (tmp_path / "a.db").is_file()


@pytest.mark.parametrize("url", ["MEMORY://", "SQLite:///x.db"])
def test_scheme_is_case_insensitive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """URL schemes are matched without regard to case, as URLs define them."""
    monkeypatch.chdir(tmp_path)
    store = leasecron.open_store(url)
    try:
        assert isinstance(store, (MemoryStore, SQLiteStore))
    finally:
        store.close()


@pytest.mark.parametrize(
    "url",
    ["mongodb://x", "http://localhost/", "sqlite3:///x.db", "memcache://x"],
)
def test_unknown_scheme_raises_config_error_listing_known_schemes(url: str) -> None:
    """An unknown URL scheme raises ConfigError (a ValueError) naming the scheme and listing the known ones."""
    with pytest.raises(ConfigError) as info:
        leasecron.open_store(url)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert url.split(":")[0] in message
    assert "memory://" in message and "sqlite://" in message


@pytest.mark.parametrize(
    "value", ["leasecron.db", "/var/lib/leasecron.db", "", "memory", "sqlite:relative.db", None, 42]
)
def test_non_url_raises_config_error_listing_known_schemes(value: Any) -> None:
    """A value that is not a scheme://... URL raises ConfigError listing the known schemes."""
    with pytest.raises(ConfigError) as info:
        leasecron.open_store(value)
    message = str(info.value)
    assert "memory://" in message and "sqlite://" in message


def test_require_names_the_pip_install_command_for_a_missing_client() -> None:
    """A backend whose client library is missing raises ConfigError saying which extra to install."""
    with pytest.raises(ConfigError) as info:
        require("no_such_module_xyz", extra="redis", store="RedisStore")
    message = str(info.value)
    assert "pip install 'leasecron[redis]'" in message
    assert "RedisStore" in message and "no_such_module_xyz" in message
    assert isinstance(info.value.__cause__, ImportError)


def test_require_returns_an_installed_module() -> None:
    """require returns the module when the client library is installed."""
    import sqlite3

    assert require("sqlite3", extra="none", store="SQLiteStore") is sqlite3


def test_create_false_reaches_every_store_class(tmp_path: Path) -> None:
    """open_store(url, create=False) opens each kind of store with create=False (default: True);
    none of them touches its server or file to open."""
    from tests.conftest import SERVERS

    pg_host, pg_port, pg_db = SERVERS.postgres()
    urls = [
        "memory://",
        f"sqlite:///{tmp_path / 'x.db'}",
        "redis://127.0.0.1:6379/0",
        "valkey://127.0.0.1:6379/0",
        f"postgresql://{pg_host}:{pg_port}/{pg_db}",
    ]
    for url in urls:
        for create in (None, True, False):
            store = leasecron.open_store(url) if create is None else leasecron.open_store(url, create=create)
            try:
                assert store.create is (create is not False), url  # type: ignore[attr-defined]
            finally:
                store.close()
    assert not list(tmp_path.iterdir())
