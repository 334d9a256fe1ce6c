"""The stores' SQL and Lua, read as text: the numbers of the protocol come from Python, rendered
in; every rule of the store contract is tagged, by its number, in each implementation of it.

What the scripts do is proved by the conformance suite against the real servers; this module
keeps their structure, which no server checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import pytest

from leasecron import Store
from leasecron.runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS
from leasecron.stores import templates
from leasecron.stores.queries import load_queries
from leasecron.stores.redis import _load_scripts
from leasecron.stores.templates import render, without_comments

STORES = Path(__file__).resolve().parents[2] / "leasecron" / "stores"
DIALECTS = ["postgres", "sqlite"]

_PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


# -- the numbers of the protocol, rendered in ------------------------------------------------------


def _scripts() -> Dict[str, str]:
    """Every script a store runs, rendered and without its comment lines: the Lua scripts and the
    named queries."""
    texts = {f"lua/{name}": without_comments(script.source) for name, script in _load_scripts().items()}
    for dialect in DIALECTS:
        for name, sql in load_queries(dialect, schema="s", table="t").items():
            texts[f"{dialect}.sql:{name}"] = sql
    return texts


def test_no_script_is_left_with_a_placeholder() -> None:
    """Every ``{name}`` of every script is filled in when the store loads it."""
    left = {name: _PLACEHOLDER.findall(text) for name, text in _scripts().items()}
    assert {name: found for name, found in left.items() if found} == {}


def test_the_tolerances_of_the_lua_scripts_are_the_python_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lua scripts state the 10 s tolerances as ``{LATE_TOLERANCE_MS}`` and
    ``{EARLY_TOLERANCE_MS}``, filled in from leasecron.runs: changed there, they change in the scripts."""
    numbers = {"LATE_TOLERANCE_MS": LATE_TOLERANCE_MS, "EARLY_TOLERANCE_MS": EARLY_TOLERANCE_MS}
    assert templates.PROTOCOL_NUMBERS == numbers
    lua = _load_scripts()["claim"].source
    assert f"local LATE_TOLERANCE_MS = {LATE_TOLERANCE_MS}\n" in lua
    monkeypatch.setitem(templates.PROTOCOL_NUMBERS, "LATE_TOLERANCE_MS", 12_345)
    monkeypatch.setitem(templates.PROTOCOL_NUMBERS, "EARLY_TOLERANCE_MS", 6_789)
    lua = _load_scripts()["claim"].source
    assert "local LATE_TOLERANCE_MS = 12345\n" in lua and "local EARLY_TOLERANCE_MS = 6789\n" in lua
    assert str(LATE_TOLERANCE_MS) not in lua


def test_render_fills_the_names_it_knows_and_leaves_every_other_brace() -> None:
    """Lua's tables and unknown names keep their braces; known names are filled in."""
    lua = "return {'won', slot, raw} .. {} .. {K} .. {table}"
    assert render(lua) == lua
    assert render(lua, table="runs") == "return {'won', slot, raw} .. {} .. {K} .. runs"
    assert render("{LATE_TOLERANCE_MS}+{EARLY_TOLERANCE_MS}") == f"{LATE_TOLERANCE_MS}+{EARLY_TOLERANCE_MS}"


# -- every rule tagged --------------------------------------------------------------------------------


def _tags(*paths: str) -> List[int]:
    text = "\n".join((STORES / path).read_text("utf-8") for path in paths)
    return sorted({int(n) for n in re.findall(r"\brule (\d+)\b", text)})


@pytest.mark.parametrize(
    "implementation, paths",
    [
        ("Python (memory, SQLite)", ["rules.py"]),
        ("Lua (Redis, Valkey)", ["lua/claim.lua", "lua/heartbeat.lua", "lua/finish.lua", "lua/release.lua"]),
    ],
)
def test_every_rule_of_the_contract_is_tagged_in_each_implementation(implementation: str, paths: List[str]) -> None:
    """Rules 1-15 of docs/protocol.rst are each tagged (``rule 4``) where an implementation carries it out."""
    assert _tags(*paths) == list(range(1, 16)), implementation


def test_the_contract_docstrings_number_the_rules() -> None:
    """Store.claim states rules 1-12, heartbeat 13, finish 14 and release 15, by number."""
    numbered = {
        "claim": range(1, 13),
        "heartbeat": [13],
        "finish": [14],
        "release": [15],
    }
    for method, numbers in numbered.items():
        doc = getattr(Store, method).__doc__ or ""
        found = [int(n) for n in re.findall(r"^\s*(\d+)\. ", doc, re.MULTILINE)]
        assert found == list(numbers), method
