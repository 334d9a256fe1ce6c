"""The interactive examples of the docs (``>>>`` blocks) run as doctests, on real stores.

Each page of docs/ that has ``>>>`` examples is one doctest, run in a fresh
directory (the page's ``sqlite:///leasecron.db`` is a file there), with
``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``. The examples of docs/stores.rst
name the usual loopback servers: Redis on ``127.0.0.1:6379`` and PostgreSQL
on ``127.0.0.1:5432``, database ``test``. The test points them at the
session's servers (those, where they run; else servers the suite starts, see
tests/conftest.py) and drops the PostgreSQL schema the page creates.
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any, Dict, List

import pytest

import leasecron
from tests.conftest import SERVERS
from tests.pg_servers import drop_schema
from tests.docs.readme_examples import DOCS

PAGES: List[str] = sorted(page.name for page in DOCS.glob("*.rst") if ">>> " in page.read_text(encoding="utf-8"))
REDIS = "127.0.0.1:6379"
POSTGRES_URL, POSTGRES_DSN = "127.0.0.1:5432/test", "host=127.0.0.1 port=5432 dbname=test"
#: The schema docs/stores.rst creates in PostgreSQL.
SCHEMA = "cron"


def _on_the_session_servers(text: str) -> str:
    """``text`` with the docs' server addresses replaced by the session's (starting them only if named)."""
    if REDIS in text:
        host, port = SERVERS.redis()
        text = text.replace(REDIS, f"{host}:{port}")
    if POSTGRES_URL in text or POSTGRES_DSN in text:
        host, port, dbname = SERVERS.postgres()
        text = text.replace(POSTGRES_URL, f"{host}:{port}/{dbname}")
        text = text.replace(POSTGRES_DSN, f"host={host} port={port} dbname={dbname}")
        _drop_schema()
    return text


def _drop_schema() -> None:
    host, port, dbname = SERVERS.postgres()
    drop_schema(f"postgresql://{host}:{port}/{dbname}", SCHEMA)


def test_the_docs_have_doctests() -> None:
    """The pages with Python examples have them as doctests (a broken glob must not make the next test vacuous)."""
    assert {"operating.rst", "stores.rst", "usage.rst"} <= set(PAGES), PAGES


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_the_page_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``>>>`` example of the page runs and prints what the page shows."""
    monkeypatch.chdir(tmp_path)
    path = DOCS / page
    text = _on_the_session_servers(path.read_text(encoding="utf-8"))
    globs: Dict[str, Any] = {}
    test = doctest.DocTestParser().get_doctest(text, globs, page, str(path), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: List[str] = []
    try:
        result = runner.run(test, out=report.append)
    finally:
        for value in globs.values():
            if isinstance(value, leasecron.LeaseCron):
                value.store.close()
        if POSTGRES_DSN in path.read_text(encoding="utf-8"):
            _drop_schema()
    assert result.attempted > 0 and result.failed == 0, "".join(report)
