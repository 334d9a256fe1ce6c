"""The rules of the store contract are numbered in docs/protocol.rst as the tests tag them.

docs/protocol.rst, "The rules of the store contract", numbers each rule
(``1.`` to ``21.``); the contract suite (tests/stores) tags the tests of a
rule with its number (``# -- rules 1, 3 and 7: ...``, ``Rules 16-19 of
docs/protocol.rst``). Every rule of the page must be tagged by a test there,
and no tag may name a rule the page does not have. The package's code (its
Python, Lua and SQL) tags the rules it implements the same way: those tags
too must name rules of the page.
"""

from __future__ import annotations

import re
from typing import Set

from tests.docs.readme_examples import DOCS, ROOT

_TAG = re.compile(r"\b[Rr]ules? (\d+(?:(?:-|, | and )\d+)*)")


def page_rules() -> Set[int]:
    """The numbers of the rules of the page's section on the store contract."""
    text = (DOCS / "protocol.rst").read_text(encoding="utf-8")
    section = text.split("The rules of the store contract\n", 1)[1]
    following = re.search(r"\n[^\n]+\n-{4,}\n", section)
    section = section[: following.start()] if following else section  # up to the next section
    return {int(number) for number in re.findall(r"^(\d+)\. ", section, re.M)}


def tagged_rules(text: str) -> Set[int]:
    """The rule numbers a text tags: ``rule 12``, ``rules 1, 3 and 7``, ``rules 16-19``."""
    found: Set[int] = set()
    for match in _TAG.finditer(text):
        for part in re.split(r", | and ", match.group(1)):
            low, _, high = part.partition("-")
            found.update(range(int(low), int(high or low) + 1))
    return found


def test_tags_are_read() -> None:
    """The tag reader understands the forms the suite uses."""
    assert tagged_rules("# -- rules 1, 3 and 7: x; rule 12; Rules 16-19 of") == {1, 3, 7, 12, 16, 17, 18, 19}


def test_every_rule_of_the_page_has_tagged_tests_and_every_tag_a_rule() -> None:
    """The contract suite tags each of the page's rules, and only those."""
    rules = page_rules()
    assert rules == set(range(1, len(rules) + 1)) and len(rules) >= 20, sorted(rules)
    tagged: Set[int] = set()
    for path in sorted((ROOT / "tests" / "stores").glob("test_*.py")):
        tagged |= tagged_rules(path.read_text(encoding="utf-8"))
    assert not rules - tagged, f"rules of docs/protocol.rst no test tags: {sorted(rules - tagged)}"
    assert not tagged - rules, f"tags of rules docs/protocol.rst does not have: {sorted(tagged - rules)}"


def test_the_package_tags_only_rules_of_the_page() -> None:
    """The stores' code tags the rules it implements (``-- rules 9-11``), every one a rule of the page,
    and the Lua and SQL that decide a claim tag most of them."""
    rules = page_rules()
    tagged: Set[int] = set()
    for path in sorted((ROOT / "leasecron").rglob("*")):
        if path.suffix in (".py", ".lua", ".sql"):
            found = tagged_rules(path.read_text(encoding="utf-8"))
            unknown = found - rules
            assert not unknown, f"{path.relative_to(ROOT)} tags rules docs/protocol.rst does not have: {unknown}"
            tagged |= found
    assert len(tagged) >= 15, sorted(tagged)
