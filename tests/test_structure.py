"""The package's shape: its import graph has no circles, and no module is much over 400 lines.

Every import statement of every module under ``leasecron/`` counts, wherever it stands (at the
top, in a function, under ``if TYPE_CHECKING``): a circle of imports is a circle of ideas, and a
reader who opens one module should not need the one that needs it. Imports made with
``importlib`` at run time (the lazy store classes) are not statements and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "leasecron"
#: "No module much over 400 lines": the line count a module of the package may not pass.
MAX_LINES = 420


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imported(name: str, path: Path, known: Set[str]) -> Iterator[str]:
    """The modules of the package that the module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # "from package import submodule" imports the submodule too
            targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                yield target


def import_graph() -> Dict[str, Set[str]]:
    """Module -> the package's modules it imports."""
    modules = _modules()
    known = set(modules)
    return {name: set(_imported(name, path, known)) for name, path in modules.items()}


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle_and_only_circles() -> None:
    """The check can fail: a made-up graph with one circle of three and a chain."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_import_graph_is_read_from_the_package() -> None:
    """The graph holds what the package imports, relative imports included (a sample of known edges)."""
    graph = import_graph()
    assert "leasecron.cron" in graph["leasecron"]  # from .cron import LeaseCron
    assert "leasecron.cli.commands" in graph["leasecron.cli"]  # from . import commands
    assert "leasecron.stores" in graph["leasecron.stores.redis"]  # from . import require


def test_the_package_imports_have_no_circles() -> None:
    """No module of leasecron/ imports, directly or through others, a module that imports it."""
    assert circles(import_graph()) == []


def test_no_module_is_much_over_400_lines() -> None:
    """Every module of the package stays small enough to read whole."""
    sizes = {name: len(path.read_text("utf-8").splitlines()) for name, path in _modules().items()}
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert too_long == {}, f"modules over {MAX_LINES} lines: {too_long}"
