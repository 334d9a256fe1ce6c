"""The public names: every store class is where users look for it, and optional drivers stay
unimported until a store that needs them is used. Each check runs in a fresh interpreter, so
no earlier test's imports can hide a missing one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_leasecron_imports_no_store_driver() -> None:
    """``import leasecron`` imports neither redis-py nor psycopg2 (both are optional extras)."""
    out = _run(
        "import sys, leasecron\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'psycopg2')))"
    )
    assert out == "[]"


@pytest.mark.parametrize(
    "expression, module",
    [
        ("leasecron.RedisStore", "leasecron.stores.redis"),
        ("leasecron.PostgresStore", "leasecron.stores.postgres"),
        ("leasecron.stores.RedisStore", "leasecron.stores.redis"),
        ("leasecron.stores.PostgresStore", "leasecron.stores.postgres"),
        ("leasecron.stores.redis.RedisStore", "leasecron.stores.redis"),
        ("leasecron.stores.postgres.PostgresStore", "leasecron.stores.postgres"),
    ],
)
def test_store_classes_resolve_after_a_plain_import(expression: str, module: str) -> None:
    """After a plain ``import leasecron``, each store class is reachable under the names users
    try, resolving to the one class, and still without importing the driver."""
    out = _run(
        "import sys, leasecron\n"
        f"cls = {expression}\n"
        "print(cls.__module__, cls.__name__,"
        " sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'psycopg2')))"
    )
    assert out == f"{module} {expression.rsplit('.', 1)[1]} []"


def test_from_imports_and_dir_list_the_lazy_stores() -> None:
    """``from leasecron import RedisStore, PostgresStore`` works, and ``dir(leasecron)`` and
    ``__all__`` list them; an unknown name is still an AttributeError."""
    out = _run(
        "import leasecron\n"
        "from leasecron import PostgresStore, RedisStore\n"
        "from leasecron.stores import PostgresStore as P, RedisStore as R\n"
        "assert (P, R) == (PostgresStore, RedisStore)\n"
        "names = ('RedisStore', 'PostgresStore')\n"
        "print(all(n in dir(leasecron) and n in leasecron.__all__ for n in names))\n"
        "try:\n"
        "    leasecron.NoSuchStore\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    assert out.splitlines() == ["True", "module 'leasecron' has no attribute 'NoSuchStore'"]
