"""The import graph of the layered packages, read from the source (ast), not by importing.

Every ``import`` counts — module level, inside functions, under ``if TYPE_CHECKING:`` — since
each is a dependency someone has to keep in mind, and a cycle that only type checkers see
today is a circular import the day someone moves it out of the guard. Relative imports are
resolved; ``from pkg import name`` where ``pkg.name`` is a module counts as importing that
module. The packages are walked, so moved or renamed modules need no change here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "storage", "protocol", "controller")
# Lower layers never import higher ones (data flows socket → broker → protocol/storage).
LOWER = ("protocol", "storage")
HIGHER = ("broker", "controller")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Every module of the packages: dotted name -> file (a C extension's: its ``.pyi`` stub)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")) + sorted((root / package).rglob("*.pyi")):
            if "__pycache__" not in path.parts:
                modules.setdefault(module_name(path, root), path)
    return modules


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name ``from <level dots><target> import ...`` refers to inside ``module``."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]  # a module's relative imports start from its package
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: Path) -> list[tuple[str, str | None]]:
    """Every import statement of the module, wherever it sits, as (absolute module, name):
    ``import a.b`` -> ("a.b", None); ``from a import b`` -> ("a", "b")."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            out.extend((base, alias.name) for alias in node.names)
    return out


def _known_target(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the repo that ``name`` denotes: itself, or its longest known prefix."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the repo it imports. ``from X import a`` is an edge to X.a
    when that is a module, else to X. Importing X.a also runs X's __init__, but that is
    not counted: a package's __init__ importing its own submodules is not a cycle."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = set()
        for base, name in imports_of(module, path):
            if name is not None and f"{base}.{name}" in modules:
                target = f"{base}.{name}"
            else:
                target = _known_target(base, modules)
            if target is not None and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Concrete cycles: in every strongly connected component of more than one module, a
    shortest cycle through each of its modules (rotated to start at the smallest name)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def strongconnect(v: str) -> None:  # Tarjan; the graphs here are small enough for recursion
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    cycles: list[list[str]] = []
    for component in components:
        for start in component:
            ring = _cycle_in(graph, set(component), start)[:-1]
            i = ring.index(min(ring))
            cycle = ring[i:] + ring[:i] + [ring[i]]
            if cycle not in cycles:
                cycles.append(cycle)
    return cycles


def _cycle_in(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """A path start -> ... -> start inside the component (breadth-first: a shortest one)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected component


def layering_violations(modules: dict[str, Path]) -> list[str]:
    out = []
    for module, path in sorted(modules.items()):
        top = module.split(".")[0]
        names = sorted({base for base, _name in imports_of(module, path)})
        if top in LOWER:
            for name in names:
                if name.split(".")[0] in HIGHER:
                    out.append(f"{module} imports {name}: {top}/ must not depend on {'/ or '.join(HIGHER)}/")
        if top == "storage":
            for name in names:
                if name.split(".")[0] == "asyncio":
                    out.append(f"{module} imports asyncio: storage/ is synchronous file code")
    return out


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found = find_modules(ROOT)
    assert {m.split(".")[0] for m in found} == set(PACKAGES)
    return found


def test_no_import_cycles(modules):
    cycles = find_cycles(import_graph(modules))
    assert not cycles, "import cycles:\n" + "\n".join("  " + " -> ".join(c) for c in cycles)


def test_lower_layers_do_not_import_higher_ones(modules):
    problems = layering_violations(modules)
    assert not problems, "\n".join(problems)


def test_loadgen_is_client_side():
    """loadgen/ (recording, replay on Spark executors, reports) runs where only the client is
    installed: it imports protocol/ and never broker/, storage/ or controller/."""
    loadgen = find_modules(ROOT, ("loadgen",))
    assert "loadgen.tap" in loadgen
    problems = [f"{module} imports {base}" for module, path in sorted(loadgen.items())
                for base, _name in imports_of(module, path) if base.split(".")[0] in ("broker", "storage", "controller")]
    assert not problems, "\n".join(problems)


def sim_imports(modules: dict[str, Path]) -> list[str]:
    return [f"{module} imports {base}" for module, path in sorted(modules.items())
            for base, _name in imports_of(module, path) if base.split(".")[0] == "sim"]


def test_production_code_never_imports_the_simulator():
    """sim/ (issue 28) drives production code; nothing in production depends on it (cli/main.py
    hands ``kbroker sim`` to it by name, importlib, not an import statement)."""
    production = find_modules(ROOT, PACKAGES + ("cli", "loadgen"))
    assert "cli.main" in production and "broker.server" in production
    problems = sim_imports(production)
    assert not problems, "\n".join(problems)


# -- the checker checks ------------------------------------------------------------------------
def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return find_modules(root, packages=sorted({rel.split("/")[0] for rel in files}))


def test_checker_sees_cycles_through_every_kind_of_import(tmp_path):
    modules = _write(tmp_path, {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "pkg/b.py": "def f():\n    from pkg import c\n",
        "pkg/c.py": "import pkg.sub.d\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/d.py": "from ..a import thing\n",
    })
    graph = import_graph(modules)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.sub.d"}
    assert graph["pkg.sub.d"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.sub.d", "pkg.a"]]


def test_checker_passes_a_layered_package_and_flags_layering(tmp_path):
    modules = _write(tmp_path, {
        "storage/__init__.py": "from .log import Log\n",
        "storage/log.py": "import asyncio\nfrom protocol.errors import E\n",
        "protocol/__init__.py": "",
        "protocol/errors.py": "def f():\n    from broker.apis import KafkaApis\n",
        "broker/__init__.py": "",
        "broker/apis.py": "from storage import Log\n",
    })
    graph = import_graph(modules)
    assert graph["broker.apis"] == {"storage"}
    assert find_cycles(graph) == [["broker.apis", "storage", "storage.log", "protocol.errors", "broker.apis"]]
    assert layering_violations(modules) == [
        "protocol.errors imports broker.apis: protocol/ must not depend on broker/ or controller/",
        "storage.log imports asyncio: storage/ is synchronous file code",
    ]


def test_checker_flags_an_import_of_the_simulator(tmp_path):
    modules = _write(tmp_path, {
        "broker/__init__.py": "",
        "broker/apis.py": "def f():\n    from sim.loop import SimLoop\n",
        "cli/__init__.py": "",
        "cli/main.py": "import importlib\nrun = importlib.import_module('sim.cli')\n",
    })
    assert sim_imports(modules) == ["broker.apis imports sim.loop"]
