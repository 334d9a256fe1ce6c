"""Quality gates: the package type-checks under ``mypy --strict`` and the code lints clean with ruff.

Both tools run as ``python -m <tool>`` from the interpreter running the tests
(the ``test`` extra installs mypy, ruff and types-croniter), with the checkout
as working directory so that ``pyproject.toml``'s ``[tool.mypy]`` and
``[tool.ruff]`` settings apply. A tool that is not installed is a skip on a
developer's machine and a failure in CI (``CI=true``). Neither tool writes a
cache into the checkout: mypy's goes to the test's temporary directory, ruff's
is off.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.ci import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]

#: What ``ruff check`` covers: the package, its tests, the benchmarks and the examples.
LINTED = ["leasecron", "tests", "benchmarks", "examples"]


def _require(module: str) -> None:
    """Skip (locally) or fail (in CI) when ``module`` is not installed in this interpreter."""
    if importlib.util.find_spec(module) is not None:
        return
    skip_or_fail(f"{module} is not installed (pip install -e '.[test]' installs it)",
                 "; CI=true: a missing quality tool fails")


def _run(args: List[str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <args>`` in the checkout; its exit code and combined output."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=540,
    )


@pytest.mark.timeout(600)
def test_mypy_strict_passes_on_the_package(tmp_path: Path) -> None:
    """``mypy --strict leasecron`` finds no issue (stubs for croniter come from types-croniter)."""
    _require("mypy")
    done = _run(["mypy", "--strict", "--cache-dir", str(tmp_path / "mypy-cache"), "leasecron"])
    print(done.stdout)
    assert done.returncode == 0, f"mypy --strict leasecron exited {done.returncode}:\n{done.stdout}"


@pytest.mark.timeout(600)
def test_ruff_check_passes_on_package_tests_benchmarks_and_examples() -> None:
    """``ruff check leasecron tests benchmarks examples`` finds nothing, with the rules of pyproject.toml."""
    _require("ruff")
    done = _run(["ruff", "check", "--no-cache", *LINTED])
    print(done.stdout)
    assert done.returncode == 0, f"ruff check {' '.join(LINTED)} exited {done.returncode}:\n{done.stdout}"
