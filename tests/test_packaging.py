"""The sdist and wheel: what they hold, their metadata, and that both work where a user puts them.

One sdist and one wheel per test module are built with ``python -m build``
(the wheel from the sdist, as a release builds it) from a copy of what the
sdist is made of (the metadata files, LICENSE, CHANGELOG.md, the package, the
tests, docs, examples and benchmarks), so that setuptools' ``build/`` and
``*.egg-info`` never land in, or race with other builds in, the working tree.
The build backend (``setuptools>=77``, for the SPDX ``License-Expression``)
comes into pip's isolated build environment from the configured package index.

The tests read the wheel as a zip file (package data, entry point, version);
read both for the licence and the metadata (the licence expression and file,
the Python classifiers, the benchmark-only extra named as such); check that
the sdist holds every file of the copied tree; run ``twine check --strict``
on both; install the wheel with ``pip install`` in a new virtual environment
and, from a temporary directory so that the checkout is not importable, check
that the installed package opens a SQLite store and claims and finishes a run
(the SQL package data), holds every SQL and Lua file (read through
``importlib.resources``), and that the ``leasecron`` console script answers
``--version`` and ``check``; and unpack the sdist, install it editable in a
new virtual environment and run part of its own tests from the unpacked tree.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "leasecron" / "stores"

#: What the sdist is made from: the metadata files, the long description, the
#: licence and changelog, and the folders MANIFEST.in grafts.
_BUILD_FILES = ["setup.py", "setup.cfg", "pyproject.toml", "README.rst", "MANIFEST.in", "LICENSE", "CHANGELOG.md"]
_BUILD_FOLDERS = ["leasecron", "tests", "docs", "examples", "benchmarks"]
#: What a copy leaves out: what test runs, builds and editors leave behind (MANIFEST.in excludes them too).
_LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.db", "*.db-*", "_build", "*.egg-info", ".*")


def _package_data() -> Dict[str, str]:
    """The checkout's SQL and Lua files, in every folder below ``sql`` and ``lua``:
    ``sql/sqlite/queries.sql`` -> its text."""
    files = [*(STORES / "sql").rglob("*.sql"), *(STORES / "lua").rglob("*.lua")]
    return {p.relative_to(STORES).as_posix(): p.read_text("utf-8") for p in files}


def _copy_build_tree(dest: Path) -> None:
    """Copy what a build reads (and nothing that other test runs create and delete meanwhile) to ``dest``."""
    dest.mkdir()
    for name in _BUILD_FILES:
        shutil.copy2(ROOT / name, dest / name)
    for name in _BUILD_FOLDERS:
        shutil.copytree(ROOT / name, dest / name, ignore=_LEFT_OUT)


def _clean_env() -> Dict[str, str]:
    """The environment of a fresh venv's commands: no PYTHONPATH pointing at the checkout, no active venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


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
def dists(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Path, Path]:
    """``python -m build`` of a copy of the checkout: the sdist, the wheel built from it, and the copy."""
    base = tmp_path_factory.mktemp("dists")
    source = base / "source"
    _copy_build_tree(source)
    _run([sys.executable, "-m", "build", "-o", str(base / "dist"), str(source)], timeout=300)
    (sdist,) = (base / "dist").glob("leasecron-*.tar.gz")
    (built,) = (base / "dist").glob("leasecron-*.whl")
    return sdist, built, source


@pytest.fixture(scope="module")
def wheel(dists: Tuple[Path, Path, Path]) -> Path:
    """The wheel, built from the sdist as a release would build it."""
    return dists[1]


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
    env = _clean_env()
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


@pytest.mark.timeout(300)
def test_licence_and_metadata_in_wheel_and_sdist(dists: Tuple[Path, Path, Path]) -> None:
    """LICENSE (the checkout's, byte for byte) is in both; the metadata declares MIT as an SPDX
    expression, the licence file, and a classifier for each Python version setup.cfg declares."""
    sdist, built, _ = dists
    licence = (ROOT / "LICENSE").read_bytes()
    assert b"MIT License" in licence
    with zipfile.ZipFile(built) as whl:
        (in_wheel,) = [n for n in whl.namelist() if re.fullmatch(r"[^/]+\.dist-info/licenses/LICENSE", n)]
        assert whl.read(in_wheel) == licence
        metadata = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    top = sdist.name[: -len(".tar.gz")]
    with tarfile.open(sdist) as tar:
        extracted = tar.extractfile(f"{top}/LICENSE")
        assert extracted is not None and extracted.read() == licence
    fields = [line.split(": ", 1) for line in metadata.split("\n\n", 1)[0].splitlines() if ": " in line]
    assert ["License-Expression", "MIT"] in fields
    assert ["License-File", "LICENSE"] in fields
    classifiers = [value for key, value in fields if key == "Classifier"]
    versions = re.findall(r"Programming Language :: Python :: (3\.\d+)", (ROOT / "setup.cfg").read_text("utf-8"))
    assert len(versions) >= 5
    for version in versions:
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # superseded by the expression
    extras = [value for key, value in fields if key == "Provides-Extra"]
    assert "peers" not in extras and "bench-peers" in extras  # the benchmark-only extra says so


@pytest.mark.timeout(300)
def test_sdist_holds_tests_docs_examples_benchmarks_and_changelog(dists: Tuple[Path, Path, Path]) -> None:
    """Every file of the copied tests, docs, examples, benchmarks and package, and the top files, are in the sdist."""
    sdist, _, source = dists
    top = sdist.name[: -len(".tar.gz")]
    with tarfile.open(sdist) as tar:
        names = {name[len(top) + 1:] for name in tar.getnames() if name.startswith(f"{top}/")}
    copied = [p for folder in _BUILD_FOLDERS for p in (source / folder).rglob("*") if p.is_file()]
    wanted = set(_BUILD_FILES) | {p.relative_to(source).as_posix() for p in copied}
    assert {"tests/conftest.py", "tests/helpers.py", "tests/servers.py", "CHANGELOG.md"} <= wanted
    missing = sorted(wanted - names)
    assert not missing, f"not in the sdist: {missing}"
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".db"))]


@pytest.mark.timeout(300)
def test_twine_check_passes_on_wheel_and_sdist(dists: Tuple[Path, Path, Path]) -> None:
    """``twine check --strict``: the long description renders on PyPI and the metadata is valid."""
    sdist, built, _ = dists
    done = _run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(built)], timeout=120)
    assert done.stdout.count("PASSED") == 2, done.stdout


@pytest.mark.timeout(600)
def test_sdist_tests_run_from_the_unpacked_sdist(dists: Tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Unpacked and installed editable in a fresh venv, the sdist's own tests run: the store contract
    on the memory store and the structure checks, from the unpacked tree."""
    sdist = dists[0]
    with tarfile.open(sdist) as tar:
        # The "data" filter (3.12's default-to-be) where this Python has it: no links or paths out of tmp_path.
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    tree = tmp_path / sdist.name[: -len(".tar.gz")]
    env = _clean_env()
    env_dir = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(env_dir)], timeout=120, cwd=tmp_path, env=env)
    python = str(env_dir / "bin" / "python")
    # pytest and its timeout guard, and redis-py, which tests/servers.py imports.
    _run([python, "-m", "pip", "install", "-q", "-e", str(tree), "pytest", "pytest-timeout", "redis"],
         timeout=300, cwd=tmp_path, env=env)
    probe = _run([python, "-c", "import leasecron; print(leasecron.__file__)"], timeout=60, cwd=tmp_path, env=env)
    assert Path(probe.stdout.strip()).resolve().parent == (tree / "leasecron").resolve()
    tests = ["tests/stores/test_contract.py", "tests/test_structure.py"]
    done = _run([python, "-m", "pytest", *tests, "-k", "memory or test_structure", "-q", "-p", "no:cacheprovider"],
                timeout=420, cwd=tree, env=env)
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed is not None and int(passed.group(1)) >= 20, done.stdout
    assert not re.search(r"\d+ (failed|error)", done.stdout), done.stdout
