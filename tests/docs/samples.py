"""The console samples of the docs: what a page shows a command printing, and how it is compared.

A page shows output in literal blocks. The samples were real output once, on
another day, in another zone, with other process ids; what must not rot is
everything else: the columns, the words, the order of the lines. So a sample
and the real output are compared by :func:`shape`, which keeps the text and
folds what changes from run to run (numbers, durations, padding, a store's
repr, a token, the ``user@host`` the CLI names as the actor), and by
:func:`assert_shows`, which lets a line ``...`` stand for lines left out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

from tests.docs.readme_examples import DOCS

#: A length of time as the CLI and the log print it: ``250 ms``, ``4.2 s``, ``5m 03s``, ``2h 05m``.
_DURATION = re.compile(r"\b(?:\d+[dhm] )?\d+(?:\.\d+)? ?(?:ms|s|m|h)\b")
#: A store's repr, as the commands name the store they read: ``SQLiteStore('x.db', table='t')``.
_STORE = re.compile(r"\b\w*Store\([^)]*\)")
#: The CLI's default actor (``user@host``), as ``pause`` and ``trigger`` record it.
_ACTOR = re.compile(r"\b[\w.-]+@[\w.-]+")
#: A run's token: 32 hex digits, new for every attempt.
_TOKEN = re.compile(r"\b[0-9a-f]{32}\b")
#: An epoch-ms time (a slot): a sample's slot stands for the slot the real run printed at that place.
EPOCH_MS = re.compile(r"\b1\d{12}\b")


def shape(line: str) -> str:
    """``line`` with what changes from run to run folded: a store's repr, the actor, durations,
    tokens, numbers (each run of digits becomes ``0``), table rules and runs of white space."""
    line = _STORE.sub("Store(...)", line)
    line = _TOKEN.sub("<token>", line)
    line = _ACTOR.sub("user@host", line)
    line = _DURATION.sub("<time>", line)
    line = re.sub(r"\d+", "0", line)
    line = re.sub(r"-{3,}", "---", line)
    return " ".join(line.split())


def literal_blocks(page: Union[str, Path]) -> List[Tuple[int, List[str]]]:
    """``(line number, lines)`` of every literal block of ``docs/<page>`` (or of the file ``page``),
    after ``::`` or a ``code-block``, dedented, without its trailing blank lines."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    blocks = []
    for number, line in enumerate(lines, start=1):
        paragraph_ends_with_colons = line.rstrip().endswith("::") and not line.lstrip().startswith(".. ")
        if not (paragraph_ends_with_colons or line.startswith(".. code-block::")):
            continue
        i = number
        while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith(":")):
            i += 1
        body: List[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        if body:
            indent = min(len(text) - len(text.lstrip()) for text in body if text.strip())
            blocks.append((number, [text[indent:] for text in body]))
    return blocks


def inline_literals(text: str) -> List[str]:
    """The inline literals (````...````) of an rst text, each on one line."""
    return [" ".join(literal.split()) for literal in re.findall(r"``(.+?)``", text, re.S)]


def joined_options(lines: Sequence[str]) -> List[str]:
    """``lines``, each line that goes on with ``[--option ...]`` joined to the line before (a
    command's synopsis, wrapped)."""
    joined: List[str] = []
    for line in lines:
        if joined and re.match(r"^\s+\[--", line):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


def sessions(page: str) -> List[Tuple[int, List[Tuple[str, List[str]]]]]:
    """The console sessions of a page: each literal block whose first line is ``$ leasecron ...``,
    as ``(line number, [(command, the lines shown below it)])``."""
    found = []
    for number, block in literal_blocks(page):
        if not block[0].startswith("$ leasecron "):
            continue
        steps: List[Tuple[str, List[str]]] = []
        for text in block:
            if text.startswith("$ "):
                steps.append((text[2:], []))
            else:
                steps[-1][1].append(text)
        found.append((number, steps))
    return found


def assert_shows(shown: Sequence[str], printed: Sequence[str], where: str) -> Dict[str, str]:
    """The lines a page ``shown`` are the lines ``printed``, line for line by :func:`shape`; a shown
    line ``...`` stands for any number of printed lines. Returns the epoch-ms times of the sample
    mapped to the real ones at the same places (a later command of the session names them)."""
    times: Dict[str, str] = {}
    i = 0
    skipping = False
    for text in shown:
        if text.strip() == "...":
            skipping = True
            continue
        wanted = shape(text)
        while skipping and i < len(printed) and shape(printed[i]) != wanted:
            i += 1
        assert i < len(printed), f"{where}: the page shows {text!r}, which the command did not print:\n" + "\n".join(
            printed
        )
        assert shape(printed[i]) == wanted, (
            f"{where}: the page shows\n  {text!r}\nwhere the command printed\n  {printed[i]!r}\n"
            "all it printed:\n" + "\n".join(printed)
        )
        times.update(zip(EPOCH_MS.findall(text), EPOCH_MS.findall(printed[i])))
        i += 1
        skipping = False
    if not skipping:
        rest = [text for text in printed[i:] if text.strip()]
        assert not rest, f"{where}: the command printed more than the page shows: {rest}"
    return times
