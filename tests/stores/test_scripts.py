"""The stores' SQL and Lua, read as text: the migrations are numbered, frozen once released and
name their functions by their number; the numbers of the protocol come from Python, rendered in;
every rule of the store contract is tagged, by its number, in each implementation of it.

What the scripts do is proved by the conformance suite against the real servers; this module
keeps their structure, which no server checks.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path
from typing import Dict, List

import pytest

from leasecron import Store
from leasecron.runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS
from leasecron.stores import postgres, sqlite, templates
from leasecron.stores.migrations import Migration, latest_version, migrations
from leasecron.stores.queries import load_queries
from leasecron.stores.redis_scripts import load_scripts
from leasecron.stores.templates import render, without_comments

STORES = Path(__file__).resolve().parents[2] / "leasecron" / "stores"
DIALECTS = ["postgres", "sqlite"]

#: The sha256 of each released migration file. A migration is never edited once released: a change
#: of the schema is a migration of its own (a new file), so this list only grows.
RELEASED = {
    "postgres/0001_runs.sql": "41792e70a7bf67dd7d0097662587c6ca39efdc5631023ed7bed6318e9bf108a1",
    "postgres/0002_claim_token.sql": "9bad8e895b19c44472ba9bf7cd46511b69d5fdfd44d12f1c6d2c61a5f639c87d",
    "sqlite/0001_runs.sql": "8cf1f087e58e79997e44e7bfd757f2a7f26be60982478cdd68ac2e2ca53c17a7",
}

_PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
_FUNCTION = re.compile(r"CREATE (OR REPLACE )?FUNCTION \{schema\}\.\{table\}_(\w+)\(")


def _rendered(migration: Migration) -> str:
    return render(without_comments(migration.text), schema="s", table="t")


# -- migrations ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_migrations_are_numbered_from_1_without_a_gap_and_the_last_is_the_schema_version(dialect: str) -> None:
    """``sql/<dialect>/NNNN_*.sql`` are numbered 1, 2, ...; the store writes the number of the last."""
    found = migrations(dialect)
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert [m.name[:4] for m in found] == [f"{m.version:04d}" for m in found]
    store_module = {"postgres": postgres, "sqlite": sqlite}[dialect]
    assert store_module.SCHEMA_VERSION == latest_version(dialect) == found[-1].version


def test_released_migrations_are_never_edited() -> None:
    """Each released migration file is as it was released (its sha256 is recorded here)."""
    files = {f"{p.parent.name}/{p.name}": p for d in DIALECTS for p in (STORES / "sql" / d).glob("[0-9]*.sql")}
    assert set(RELEASED) <= set(files)
    hashes = {name: hashlib.sha256(files[name].read_bytes()).hexdigest() for name in RELEASED}
    assert hashes == RELEASED


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_function_carries_the_number_of_the_migration_that_created_it(dialect: str) -> None:
    """No migration replaces a function in place; a function of migration N > 1 is named
    ``<table>_<name>_vN``, and migration 1's (0.1's) carry no number."""
    for migration in migrations(dialect):
        for replace, name in _FUNCTION.findall(migration.text):
            assert not replace, f"{migration.name} replaces {name} in place"
            number = re.search(r"_v(\d+)$", name)
            if migration.version == 1:
                assert number is None, f"{migration.name}: {name}"
            else:
                assert number is not None and int(number.group(1)) == migration.version, f"{migration.name}: {name}"


def _latest_claim_function() -> Migration:
    """The latest PostgreSQL migration that creates a claim function (``<table>_claim_vN``)."""
    made = [m for m in migrations("postgres") if re.search(r"FUNCTION \{schema\}\.\{table\}_claim_v\d+\(", m.text)]
    return made[-1]


def test_this_releases_claim_calls_the_claim_function_of_the_latest_migration_that_made_one() -> None:
    """The claim (a prepared statement) and a batch of claims call ``<table>_claim_vN``, the claim
    function of the latest migration N that made one."""
    latest = _latest_claim_function()
    queries = load_queries("postgres", schema="s", table="t")
    assert f"s.t_claim_v{latest.version}(" in queries["claim_prepare"]
    assert f"s.t_claim_v{latest.version}(" in queries["claim_many"]
    assert f"CREATE FUNCTION s.t_claim_v{latest.version}(" in _rendered(latest)


# -- the numbers of the protocol, rendered in ------------------------------------------------------


def _scripts() -> Dict[str, str]:
    """Every script a store runs, rendered and without its comment lines: the Lua scripts, the named
    queries, the migrations."""
    texts = {f"lua/{name}": without_comments(script.source) for name, script in load_scripts().items()}
    for dialect in DIALECTS:
        for name, sql in load_queries(dialect, schema="s", table="t").items():
            texts[f"{dialect}/queries.sql:{name}"] = sql
        for migration in migrations(dialect):
            texts[f"{dialect}/{migration.name}"] = _rendered(migration)
    return texts


def test_no_script_is_left_with_a_placeholder() -> None:
    """Every ``{name}`` of every script is filled in when the store loads it."""
    left = {name: _PLACEHOLDER.findall(text) for name, text in _scripts().items()}
    assert {name: found for name, found in left.items() if found} == {}


def test_the_tolerances_of_the_scripts_are_the_python_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lua scripts and this release's claim function state the 10 s tolerances as
    ``{LATE_TOLERANCE_MS}`` and ``{EARLY_TOLERANCE_MS}``, filled in from leasecron.runs: changed
    there, they change in every script."""
    numbers = {"LATE_TOLERANCE_MS": LATE_TOLERANCE_MS, "EARLY_TOLERANCE_MS": EARLY_TOLERANCE_MS}
    assert templates.PROTOCOL_NUMBERS.items() >= numbers.items()
    lua = load_scripts()["claim"].source
    claim_v2 = _rendered(migrations("postgres")[1])
    assert f"local LATE_TOLERANCE_MS = {LATE_TOLERANCE_MS}\n" in lua
    assert f"p_max_late + {LATE_TOLERANCE_MS} THEN" in claim_v2
    monkeypatch.setitem(templates.PROTOCOL_NUMBERS, "LATE_TOLERANCE_MS", 12_345)
    monkeypatch.setitem(templates.PROTOCOL_NUMBERS, "EARLY_TOLERANCE_MS", 6_789)
    lua = load_scripts()["claim"].source
    claim_v2 = _rendered(migrations("postgres")[1])
    assert "local LATE_TOLERANCE_MS = 12345\n" in lua and "local EARLY_TOLERANCE_MS = 6789\n" in lua
    assert "p_max_late + 12345 THEN" in claim_v2 and "p_slot > v_now + 6789 THEN" in claim_v2
    assert "v_now - p_max_late - 12345" in claim_v2
    assert str(LATE_TOLERANCE_MS) not in lua and str(LATE_TOLERANCE_MS) not in claim_v2
    scripts = {name: text for name, text in _scripts().items() if name not in RELEASED}  # 0.1's are frozen
    hard_coded = [name for name, text in scripts.items() if re.search(rf"\b{LATE_TOLERANCE_MS}\b", text)]
    assert hard_coded == []  # every newer script states the 10 s as the number rendered in


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


#: Each implementation of the store contract: its files, and (first) the file of its claim.
IMPLEMENTATIONS = {
    "Python (memory, SQLite)": ["claim_rules.py", "rules.py"],
    "Lua (Redis, Valkey)": ["lua/claim.lua"] + sorted(
        f"lua/{p.name}" for p in (STORES / "lua").glob("*.lua") if p.name not in ("claim.lua", "common.lua")
    ),
    "PL/pgSQL (PostgreSQL)": [f"sql/postgres/{m.name}" for m in migrations("postgres")],
}


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_every_rule_of_the_contract_is_tagged_in_each_implementation(implementation: str) -> None:
    """Rules 1-20, 23 (a claim from an older schedule is stale), 24 (set_schedule) and 26 (record_return)
    of docs/protocol.rst are each tagged (``rule 4``) where an implementation carries it out, and rule 22
    (a write waits for the replicas) where the store has replicas to wait for: Redis's."""
    replicated = [22] if implementation.startswith("Lua") else []
    expected = list(range(1, 21)) + replicated + [23, 24, 26]
    assert _tags(*IMPLEMENTATIONS[implementation]) == expected, implementation


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_the_claim_of_each_implementation_carries_the_rules_of_pausing_manual_runs_and_attempts(
    implementation: str,
) -> None:
    """The claim code tags rules 16 (paused), 17 (a manual claim), 20 (the attempts it records) and 23
    (stale) beside rules 1-12; the code of pause and resume rule 18, and that of request_run rule 19."""
    paths = IMPLEMENTATIONS[implementation]
    claim_code = [f"sql/postgres/{_latest_claim_function().name}"] if implementation.startswith("PL") else paths[:1]
    assert set(_tags(*claim_code)) >= set(range(1, 13)) | {16, 17, 20, 23}, implementation
    if implementation.startswith("Python"):
        from leasecron.stores.rules import TableStore

        for method, rule in [("_pause", 18), ("_resume", 18), ("_request_run", 19)]:
            assert f"# rule {rule}" in inspect.getsource(getattr(TableStore, method)), method


def test_the_contract_docstrings_number_the_rules() -> None:
    """Store.claim states rules 1-12, 23, 16, 17 and 20 (in this order), heartbeat 13,
    finish 14, release 15, pause 18, request_run 19 and set_schedule 24, by number."""
    numbered = {
        "claim": [*range(1, 13), 23, 16, 17, 20],
        "heartbeat": [13],
        "finish": [14],
        "release": [15],
        "pause": [18],
        "request_run": [19],
        "set_schedule": [24],
    }
    for method, numbers in numbered.items():
        doc = getattr(Store, method).__doc__ or ""
        found = [int(n) for n in re.findall(r"^\s*(\d+)\. ", doc, re.MULTILINE)]
        assert found == list(numbers), method


def test_each_lua_script_defines_every_helper_it_names() -> None:
    """A script carries the helpers of common.lua it names (and those they name), no others
    (redis_scripts.helpers_for): every helper name in its text is defined in it, so no branch,
    however rare, calls a helper that was left out; a heartbeat carries none of the requests'."""
    from leasecron.stores.redis_scripts import load_scripts

    common = (STORES / "lua" / "common.lua").read_text(encoding="utf-8")
    helpers = set(re.findall(r"^local function (\w+)\(", common, re.M))
    scripts = load_scripts()
    for name, script in scripts.items():
        code = re.sub(r"--.*$", "", script.source, flags=re.M)
        defined = set(re.findall(r"^local function (\w+)\(", code, re.M)) & helpers
        named = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", code)) & helpers
        assert named <= defined, f"{name}.lua calls helpers it lacks: {sorted(named - defined)}"
    assert "load_request" in scripts["claim"].source
    assert "load_request" not in scripts["heartbeat"].source and "state_reply" not in scripts["heartbeat"].source
