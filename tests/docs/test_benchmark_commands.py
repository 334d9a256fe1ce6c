"""The benchmark commands and the paths the docs name are real.

The docs tell readers how to reproduce each figure: ``python benchmarks/X.py
--option ...``, in literal blocks and in inline literals. Each such command
must name a benchmark that exists, and each of its options must be one the
benchmark's ``--help`` lists; the map of the repository in
docs/development.rst names only paths that exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import lru_cache
from typing import Dict, List, Set, Tuple

import pytest

from tests.docs.readme_examples import DOCS, README, ROOT
from tests.docs.samples import inline_literals, joined_options

_COMMAND = re.compile(r"python (benchmarks/[\w/]+\.py)")
_OPTION = re.compile(r"--[\w-]+")


def _pieces(text: str) -> List[str]:
    """The inline literals of an rst text, each on one line, and its lines without one (the lines of
    literal blocks among them), a line that goes on with ``[--option ...]`` joined to the line before."""
    lines = joined_options(text.splitlines())
    return inline_literals(text) + [line for line in lines if "``" not in line]


def documented_commands() -> List[Tuple[str, str, Set[str]]]:
    """(page, benchmark, options) for every ``python benchmarks/X.py ...`` of the docs and the README,
    the options in brackets (``[--store URL]``) included."""
    found = []
    for page in [README, *sorted(DOCS.glob("*.rst"))]:
        for piece in _pieces(page.read_text(encoding="utf-8")):
            for match in _COMMAND.finditer(piece):
                found.append((page.name, match.group(1), set(_OPTION.findall(piece[match.end():]))))
    return found


@lru_cache(maxsize=None)
def help_text(benchmark: str) -> str:
    """What ``python benchmarks/X.py --help`` prints (it exits 0)."""
    result = subprocess.run(
        [sys.executable, benchmark, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, f"{benchmark} --help: {result.stderr}"
    return result.stdout


COMMANDS = documented_commands()
BY_BENCHMARK: Dict[str, Set[str]] = {}
for _page, _benchmark, _options in COMMANDS:
    BY_BENCHMARK.setdefault(_benchmark, set()).update(_options)


def test_the_docs_give_benchmark_commands() -> None:
    """The extractor finds the commands (a broken pattern must not make the next test vacuous)."""
    assert {"benchmarks/chaos.py", "benchmarks/store_ops.py", "benchmarks/fire_lag.py"} <= set(BY_BENCHMARK)
    assert "--seed" in BY_BENCHMARK["benchmarks/chaos.py"], BY_BENCHMARK["benchmarks/chaos.py"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("benchmark", sorted(BY_BENCHMARK))
def test_each_command_names_a_benchmark_and_its_options(benchmark: str) -> None:
    """The benchmark exists and its ``--help`` lists every option the docs give it."""
    assert (ROOT / benchmark).is_file(), benchmark
    listed = set(_OPTION.findall(help_text(benchmark)))
    unknown = sorted(BY_BENCHMARK[benchmark] - listed)
    pages = sorted({page for page, name, _ in COMMANDS if name == benchmark})
    assert not unknown, f"{benchmark}: the docs ({', '.join(pages)}) give options it does not have: {unknown}"


def test_the_map_of_the_repository_names_paths_that_exist() -> None:
    """docs/development.rst's map: each path at the start of a line of its literal block exists."""
    text = (DOCS / "development.rst").read_text(encoding="utf-8")
    paths = re.findall(r"^    ((?:tests|docs|benchmarks|leasecron|examples)/\S*)", text, re.M)
    assert len(paths) >= 8, paths
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert not missing, missing
