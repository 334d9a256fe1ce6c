"""The fast lane that docs/development.rst documents selects what it says, and nothing on a server.

The documented command is run as it stands (its interpreter replaced by this one) with
``--collect-only -q``, and what it collects is compared with a collection of the same modules
without it: the store contract on memory and SQLite, the stepped engine tests and the structure
tests are all in; no test on Redis, Valkey, PostgreSQL or a cluster is.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from typing import List, Set

from tests.fast_lane import ROOT, STRUCTURE_TESTS

#: The modules whose every test is in the lane (in ``tests/engine/test_stepped.py`` every test is stepped).
WHOLLY_IN = ["tests/engine/test_stepped.py", *STRUCTURE_TESTS]
CONTRACT = "tests/stores/test_contract.py"
SERVER_WORDS = {"redis", "valkey", "postgresql", "cluster"}


def documented_command() -> List[str]:
    """The fast lane's command in docs/development.rst: the first literal line running ``-m fast``."""
    text = (ROOT / "docs" / "development.rst").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if line.startswith("    ") and "-m fast" in line]
    assert lines, "docs/development.rst documents no command with -m fast"
    top = text.splitlines().index("    " + lines[0])
    assert top < 20, f"the fast lane's command is on line {top + 1} of docs/development.rst, not near its top"
    return shlex.split(lines[0])


def collected(args: List[str]) -> Set[str]:
    """The test ids ``python -m pytest ARGS --collect-only -q`` collects in the checkout."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


def params(test_id: str) -> List[str]:
    """The parts of a test id's parameters (``[sqlite-3]``: sqlite and 3)."""
    found = re.search(r"\[(.*)\]$", test_id)
    return found.group(1).split("-") if found else []


def test_the_documented_command_selects_the_lane_and_nothing_on_a_server() -> None:
    """The documented command collects the in-process contract, stepped and structure tests; none on a server."""
    command = documented_command()
    assert command[:3] == [".venv/bin/python", "-m", "pytest"], command
    lane = collected(command[3:])
    every = collected([CONTRACT, *WHOLLY_IN])

    contract = {t for t in every if t.startswith(CONTRACT + "::")}
    in_process = {t for t in contract if params(t)[:1] in (["memory"], ["sqlite"])}
    assert len(in_process) >= 200 and {params(t)[0] for t in in_process} == {"memory", "sqlite"}, len(in_process)
    assert in_process <= lane, sorted(in_process - lane)[:10]
    assert not (contract - in_process) & lane, sorted((contract - in_process) & lane)[:10]

    for module in WHOLLY_IN:
        tests = {t for t in every if t.startswith(module + "::")}
        assert tests and tests <= lane, (module, sorted(tests - lane)[:10])

    on_a_server = sorted(t for t in lane if SERVER_WORDS & set(params(t)))
    assert on_a_server == [], on_a_server[:10]
    places = ("tests/stores/", "tests/engine/", "tests/test_structure.py")
    elsewhere = sorted(t for t in lane if not t.startswith(places))
    assert elsewhere == [], elsewhere[:10]
