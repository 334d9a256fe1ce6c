"""The built wheel carries what the package reads at run time, and works installed in a fresh venv.

One wheel per test module is built with ``pip wheel`` from a copy of what a
build reads (the metadata files and the package), so that setuptools'
``build/`` and ``*.egg-info`` never land in, or race with other builds in,
the working tree. The first test reads the wheel as a zip file; the second
installs it with ``pip install`` in a new virtual environment (its
dependencies from the configured package index) and, from a temporary
directory so that the checkout is not importable, checks that the installed
package opens a SQLite store and claims and finishes a run (the SQL package
data), holds every SQL and Lua file (read through ``importlib.resources``),
and that the ``leasecron`` console script answers ``--version`` and ``check``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "leasecron" / "stores"

#: What a build of the checkout reads besides the package: its metadata, the
#: long description, and (setuptools' default ``license_files``) licence notices.
_BUILD_INPUTS = ["setup.py", "setup.cfg", "pyproject.toml", "README.rst", "MANIFEST.in"]
_LICENCE_GLOBS = ["LICEN[CS]E*", "COPYING*", "NOTICE*", "AUTHORS*"]


def _package_data() -> Dict[str, str]:
    """The checkout's SQL and Lua files, in every folder below ``sql`` and ``lua``:
    ``sql/sqlite/queries.sql`` -> its text."""
    files = [*(STORES / "sql").rglob("*.sql"), *(STORES / "lua").rglob("*.lua")]
    return {p.relative_to(STORES).as_posix(): p.read_text("utf-8") for p in files}


def _copy_build_tree(dest: Path) -> None:
    """Copy what a build reads (and nothing that other test runs create and delete meanwhile) to ``dest``."""
    dest.mkdir()
    tops = [ROOT / name for name in _BUILD_INPUTS] + [p for g in _LICENCE_GLOBS for p in ROOT.glob(g)]
    for path in tops:
        if path.is_file():
            shutil.copy2(path, dest / path.name)
    shutil.copytree(ROOT / "leasecron", dest / "leasecron", ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]"))


def _run(
    args: List[str], timeout: float, cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    """Run ``args``; fail the test with its output when it exits with an error."""
    done = subprocess.run(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built by ``pip wheel --no-deps`` from a copy of the checkout."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    _copy_build_tree(source)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(source)], timeout=240)
    (built,) = (base / "dist").glob("leasecron-*.whl")
    return built


@pytest.mark.timeout(300)
def test_wheel_contains_package_data_and_entry_point(wheel: Path) -> None:
    """The wheel holds py.typed, every SQL and Lua file, the dashboard's templates and static
    files, the CLI entry point and the version from __init__."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "leasecron/py.typed" in names
    data = _package_data()
    assert len(data) >= 11  # the queries and migrations of two dialects, six Lua scripts
    for name in data:
        assert f"leasecron/stores/{name}" in names, name
    dashboard = ROOT / "leasecron" / "contrib" / "dashboard"
    shown = [p for folder in ("templates", "static") for p in (dashboard / folder).rglob("*") if p.is_file()]
    assert len(shown) >= 8  # the dashboard's pages and their script, style and icon
    for path in shown:
        assert path.relative_to(ROOT).as_posix() in names, path
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "leasecron = leasecron.cli:main" in text
    import leasecron

    assert wheel.name.startswith(f"leasecron-{leasecron.__version__}-")


#: Run by the fresh venv's interpreter: the installed package's location, a
#: claim and finish on a SQLite store (argv[1]), and the package data it holds (every SQL and Lua
#: file, in every folder).
_IN_VENV = textwrap.dedent(
    """
    import json, sys
    from importlib import resources

    import leasecron

    store = leasecron.open_store(sys.argv[1])
    try:
        slot = store.now_ms() - 1_000
        claim = store.claim("packaging", slot, runner="fresh-venv", lease_ms=60_000)
        finished = store.finish("packaging", slot, claim.run.token, "success") if claim.run else False
        run = store.get_run("packaging", slot)
    finally:
        store.close()
    def files(folder, path):
        for entry in folder.iterdir():
            if entry.is_dir():
                yield from files(entry, f"{path}/{entry.name}")
            elif entry.name.endswith((".sql", ".lua")):
                yield f"{path}/{entry.name}", entry.read_text("utf-8")

    stores = resources.files("leasecron.stores")
    data = {**dict(files(stores.joinpath("sql"), "sql")), **dict(files(stores.joinpath("lua"), "lua"))}
    print(json.dumps({
        "file": leasecron.__file__,
        "version": leasecron.__version__,
        "py_typed": resources.files("leasecron").joinpath("py.typed").is_file(),
        "outcome": claim.outcome,
        "finished": finished,
        "status": run.status if run else None,
        "data": data,
    }))
    """
)


@pytest.mark.timeout(300)
def test_wheel_installed_in_a_fresh_venv_works(wheel: Path, tmp_path: Path) -> None:
    """pip-installed in a new venv: SQLite claim/finish, the Lua files, ``leasecron --version`` and ``check`` work."""
    # Nothing of the test run leaks in: no PYTHONPATH pointing at the checkout, no active venv.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run_dir = tmp_path / "run"  # the working directory: the checkout is not on sys.path
    run_dir.mkdir()
    env_dir = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(env_dir)], timeout=120, cwd=run_dir, env=env)
    bin_dir = env_dir / "bin"
    python = str(bin_dir / "python")
    _run([python, "-m", "pip", "install", "-q", str(wheel)], timeout=180, cwd=run_dir, env=env)

    done = _run([python, "-c", _IN_VENV, f"sqlite:///{run_dir / 'x.db'}"], timeout=60, cwd=run_dir, env=env)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    import leasecron

    installed = Path(found["file"]).resolve()
    assert env_dir.resolve() in installed.parents, f"leasecron imported from {installed}, not from the fresh venv"
    assert found["version"] == leasecron.__version__
    assert found["py_typed"] is True
    assert (found["outcome"], found["finished"], found["status"]) == ("won", True, "success"), found
    assert found["data"] == _package_data()  # every SQL and Lua file, byte for byte, and no others

    script = str(bin_dir / "leasecron")
    version = _run([script, "--version"], timeout=60, cwd=run_dir, env=env)
    assert version.stdout.strip() == f"leasecron {leasecron.__version__}"
    check = _run([script, "check", f"sqlite:///{run_dir / 'check.db'}"], timeout=60, cwd=run_dir, env=env)
    lines = check.stdout.strip().splitlines()
    assert lines[-1] == "ok", check.stdout
    assert any(line.startswith("server") and "SQLite" in line for line in lines), check.stdout
