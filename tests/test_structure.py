"""The package's shape: where each module lives, which layer may import which, no import circles
(in leasecron/ and benchmarks/), no module much over 400 lines, and engine parts wired by roles.

Every import statement of every module counts, wherever it stands (at the top, in a function,
under ``if TYPE_CHECKING``): a circle of imports is a circle of ideas, and a reader who opens one
module should not need the one that needs it. Imports made with ``importlib`` at run time (the
lazy store classes, the old names of ``leasecron.compat``) are not statements and do not count.
"""

from __future__ import annotations

import ast
import types
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set

from leasecron import MemoryStore
from leasecron.engine import Engine
from leasecron.engine.clock import StoreClock
from leasecron.events import Emitter

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "leasecron"
BENCHMARKS = ROOT / "benchmarks"
#: "No module much over 400 lines": the line count a module of the package may not pass.
MAX_LINES = 420

#: The package root: the public face (LeaseCron, jobs, options, schedules, the handler's context,
#: events, how runs are shown), the plain data of the model (runs, states, errors, controls, what a
#: store can keep) and the old names of earlier versions. Everything else is in a subpackage.
FACE = {"leasecron", "leasecron.__main__", "leasecron.cron", "leasecron.jobs", "leasecron.options",
        "leasecron.schedules", "leasecron.context", "leasecron.events", "leasecron.formatting",
        "leasecron.stored", "leasecron.schedule_data", "leasecron.announcements"}  # fmt: skip
MODEL = {"leasecron.runs", "leasecron.states", "leasecron.errors", "leasecron.controls", "leasecron.limits",
         "leasecron.version", "leasecron.watching"}  # fmt: skip
OLD_NAMES = {"leasecron.compat"}
#: What makes a started instance work.
ENGINE = {
    f"leasecron.engine.{name}"
    for name in ("core", "roles", "roster", "slots", "batches", "claims", "backups", "catch_up", "polling",
                 "live_runs", "live", "tries", "handlers", "workers", "claim_pool", "scheduler", "clock",
                 "clock_sync", "store_calls", "signals", "stored_jobs", "announcer", "finishes", "heartbeats",
                 "returns")
} | {"leasecron.engine"}  # fmt: skip


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path = PACKAGE) -> Dict[str, Path]:
    """The modules under ``root`` by dotted name: ``leasecron.x`` for the package, and for the
    benchmarks the names their scripts import them by (``speedlib.baseline``, with benchmarks/
    first on ``sys.path``)."""
    base = root.parent if root == PACKAGE else root
    return {_module_name(path, base): path for path in sorted(root.rglob("*.py"))}


def _imported(name: str, path: Path, known: Set[str]) -> Iterator[str]:
    """The modules of ``known`` that the module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # "from package import submodule" imports the submodule too
            targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            target = target[len("benchmarks."):] if target.startswith("benchmarks.") else target
            if target in known and target != name:
                yield target


def import_graph(root: Path = PACKAGE) -> Dict[str, Set[str]]:
    """Module -> the modules under ``root`` it imports."""
    modules = _modules(root)
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


def _imports_of(graph: Dict[str, Set[str]], importers: Set[str], prefix: str) -> Dict[str, Set[str]]:
    """Which modules of ``importers`` import a module named ``prefix`` or under it."""
    found = {
        name: {t for t in graph[name] if t == prefix or t.startswith(prefix + ".")}
        for name in importers
        if name in graph
    }
    return {name: targets for name, targets in found.items() if targets}


def _under(graph: Dict[str, Set[str]], prefix: str) -> Set[str]:
    return {name for name in graph if name == prefix or name.startswith(prefix + ".")}


def test_the_circle_finder_finds_a_circle_and_only_circles() -> None:
    """The check can fail: a made-up graph with one circle of three and a chain."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_import_graph_is_read_from_the_package_and_the_benchmarks() -> None:
    """The graphs hold what the modules import, relative imports included (a sample of known edges)."""
    graph = import_graph()
    assert "leasecron.cron" in graph["leasecron"]  # from .cron import LeaseCron
    assert "leasecron.cli.commands" in graph["leasecron.cli"]  # from . import commands
    assert "leasecron.stores" in graph["leasecron.stores.redis"]  # from . import require
    assert "leasecron.engine.claims" in graph["leasecron.engine.batches"]  # from .claims import Claims
    benchmarks = import_graph(BENCHMARKS)
    assert "speedlib.baseline" in benchmarks["store_ops"]


def test_the_package_and_the_benchmarks_have_no_import_circles() -> None:
    """No module of leasecron/ or benchmarks/ imports, directly or through others, a module that imports it."""
    assert circles(import_graph()) == []
    assert circles(import_graph(BENCHMARKS)) == []


def test_the_root_holds_the_face_and_the_model_and_the_engine_its_modules() -> None:
    """The package root keeps only the public face, the model and the old names; leasecron/engine/
    holds the engine's modules, and nothing else is at the root but the subpackages."""
    modules = set(_modules())
    root = {name for name in modules if name.count(".") <= 1 and not (PACKAGE / name.split(".")[-1]).is_dir()}
    assert root == FACE | MODEL | OLD_NAMES
    assert _under({m: set() for m in modules}, "leasecron.engine") == ENGINE
    subpackages = {name.split(".")[1] for name in modules if name.count(".") >= 2}
    assert subpackages == {"cli", "contrib", "engine", "stores"}


def test_the_layers_hold() -> None:
    """The dashboard imports nothing of the command line; contrib nothing of the engine; the model
    and the face nothing of the stores (LeaseCron only the stores' public face, to open one); the
    stores nothing above the model; the engine nothing of the command line or contrib."""
    graph = import_graph()
    assert _imports_of(graph, _under(graph, "leasecron.contrib.dashboard"), "leasecron.cli") == {}
    assert _imports_of(graph, _under(graph, "leasecron.contrib"), "leasecron.engine") == {}
    model = (FACE | MODEL) - {"leasecron", "leasecron.cron"}
    assert _imports_of(graph, model, "leasecron.stores") == {}
    assert _imports_of(graph, {"leasecron.cron"}, "leasecron.stores") == {"leasecron.cron": {"leasecron.stores"}}
    stores = _under(graph, "leasecron.stores")
    for above in ("leasecron.engine", "leasecron.cli", "leasecron.contrib", "leasecron.cron"):
        assert _imports_of(graph, stores, above) == {}, above
    engine = _under(graph, "leasecron.engine")
    for above in ("leasecron.cli", "leasecron.contrib", "leasecron.cron"):
        assert _imports_of(graph, engine, above) == {}, above


def test_no_module_is_much_over_400_lines() -> None:
    """Every module of the package stays small enough to read whole."""
    sizes = {name: len(path.read_text("utf-8").splitlines()) for name, path in _modules().items()}
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert too_long == {}, f"modules over {MAX_LINES} lines: {too_long}"


# -- engine parts are wired by roles ---------------------------------------------------------------


def _engine_parts(root: Any) -> Iterator[Any]:
    """``root`` and every object of a leasecron.engine class reachable from it through attributes."""
    seen: Set[int] = set()
    todo = [root]
    while todo:
        part = todo.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        yield part
        for value in vars(part).values():
            if type(value).__module__.startswith("leasecron.engine.") and hasattr(value, "__dict__"):
                todo.append(value)


def _callables_held(part: Any) -> Dict[str, Any]:
    """The attributes of ``part`` that are functions (lambdas too) or bound methods."""
    return {
        name: value
        for name, value in vars(part).items()
        if isinstance(value, (types.FunctionType, types.MethodType))
    }


def test_the_callables_check_finds_a_bound_method_and_a_lambda() -> None:
    """The check below can fail: a part holding a lambda and a bound method is caught."""

    class Part:
        def __init__(self) -> None:
            self.later = lambda: None
            self.method = self.__init__

    assert set(_callables_held(Part())) == {"later", "method"}


def test_no_engine_part_is_handed_a_lambda_or_a_bound_method_when_built() -> None:
    """An engine, as built, holds its parts as objects: none of them holds a function or a bound
    method handed by another (only named collaborators); and no engine module passes a lambda to
    a constructor of an engine class."""
    store = MemoryStore()
    engine = Engine(store, "r", Emitter("r"), StoreClock(store))
    parts = list(_engine_parts(engine))
    names = {type(part).__name__ for part in parts}
    assert names >= {"Engine", "Claims", "Backups", "Batches", "Slots", "RequestPoller", "LiveRuns", "Roster",
                     "Scheduler", "ClaimPool", "Workers", "ClockSync", "StoreClock", "Instance", "RunSupport"}
    held = {type(part).__name__: _callables_held(part) for part in parts}
    assert {name: calls for name, calls in held.items() if calls} == {}
    engine.stop(0)

    trees = {name: ast.parse(path.read_text("utf-8")) for name, path in _modules().items() if name in ENGINE}
    classes = {node.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    lambdas = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
                arguments = list(node.args) + [keyword.value for keyword in node.keywords]
                lambdas += [f"{name}:{node.lineno}" for arg in arguments if isinstance(arg, ast.Lambda)]
    assert lambdas == []
