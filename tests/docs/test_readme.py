"""The README is the project's front page: short, with what a newcomer needs first at its top.

A newcomer must find the install lines, the quickstart, the gunicorn setup
and the guarantees at the top (rendered, the install lines, the quickstart
and the gunicorn heading fill the first screen of a laptop), then the two
commands to try it from a clone (the demo; the tests, which ``.ci/run`` reads
from here), before the longer sections; the rest lives on the docs site,
which the README links to.
"""

from __future__ import annotations

import re
from typing import List

from tests.docs.readme_examples import README

LINES: List[str] = README.read_text(encoding="utf-8").splitlines()

#: The front page stays about 200 lines long: what does not fit belongs on the docs site.
MAX_LINES = 230
#: The install lines: within the first lines, before any section.
TOP_LINES = 20
#: The quickstart, the gunicorn setup and the guarantees all begin within this many lines.
FIRST_SECTIONS_LINES = 70
#: The two commands (the demo; the tests): right after those, within this many lines.
COMMAND_LINES = 100


def _line_of(pattern: str) -> int:
    """The 1-based number of the first README line matching ``pattern``; fails the test when none does."""
    for number, line in enumerate(LINES, start=1):
        if re.search(pattern, line):
            return number
    raise AssertionError(f"README.rst has no line matching {pattern!r}")


def _section(title: str) -> int:
    """The line of a section title (the title line, followed by its underline)."""
    for number, (line, under) in enumerate(zip(LINES, LINES[1:]), start=1):
        if line == title and len(under) >= len(title) and set(under) <= set("-=~"):
            return number
    raise AssertionError(f"README.rst has no section {title!r}")


def test_the_readme_is_about_200_lines() -> None:
    """The README is short: the long form is the docs site."""
    assert 150 <= len(LINES) <= MAX_LINES, len(LINES)


def test_install_comes_first_and_the_two_commands_after_the_guarantees() -> None:
    """The three install lines come before the first section; the demo and test commands follow the
    guarantees (users' instructions before contributors'), near the top."""
    first_section = _section("Quickstart")
    for pattern in (
        r"^    pip install leasecron\b",
        r"^    pip install 'leasecron\[redis\]'",
        r"^    pip install 'leasecron\[postgres\]'",
    ):
        assert _line_of(pattern) <= min(TOP_LINES, first_section), pattern
    for pattern in (r"^\.\. demo command$", r"^\.\. test command$"):
        assert _section("Guarantees") < _line_of(pattern) <= COMMAND_LINES, pattern


def test_quickstart_gunicorn_and_guarantees_are_near_the_top() -> None:
    """The quickstart, the gunicorn setup and the guarantees begin within the first 70 lines, in that order."""
    lines = [_section(title) for title in ("Quickstart", "gunicorn", "Guarantees")]
    assert lines == sorted(lines) and lines[-1] <= FIRST_SECTIONS_LINES, lines


def test_the_guarantees_name_what_can_duplicate_a_run() -> None:
    """The one guarantees paragraph is honest: it names the cases that can run a slot twice."""
    start = _section("Guarantees")
    text = re.sub(r"\s+", " ", " ".join(LINES[start + 1:_section("Try it from a clone")]))
    for phrase in ("exactly once", "appendonly", "asynchronous replica", "replicas=N", "ignores its abort"):
        assert phrase in text, phrase


def test_the_readme_links_into_the_docs_site() -> None:
    """The README links the docs pages a newcomer needs next, and each linked file exists."""
    links = re.findall(r"<((?:docs|examples)/[^>]+)>`__", README.read_text(encoding="utf-8"))
    for page in ("docs/usage.rst", "docs/gunicorn.rst", "docs/guarantees.rst", "docs/index.rst"):
        assert page in links, page
    missing = [link for link in links if not (README.parent / link).is_file()]
    assert not missing, missing
