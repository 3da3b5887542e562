"""nmt's packages import one another in one direction: a cycle means two parts that cannot be understood (or
loaded) one without the other, and hiding one behind a lazy import or a module ``__getattr__`` only moves the
failure. The graph is read from the source files with ``ast`` (nothing is imported), every import statement
counts, at module level or inside a function. Two graphs are checked: modules (no cycle anywhere), and packages,
where ``nmt.data`` or a top-level module such as ``nmt.errors`` is one node (no cycle between them). The built-in
plugins (``plugins/``, installed as ``nmt.plugins``) and the console scripts (``cli/``, installed as ``nmt.cli``)
are in both: they import the core's base classes and registries, and the core never imports them by name, but for
``nmt/plugin_loader.py``, which loads the plugins by name at run time (that edge is left out of the package graph).

``python -m pytest -s tests/test_import_graph.py`` prints the packages by level (``package_levels``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> the package it is installed as (pyproject.toml's package-dir)
SOURCES = {ROOT / "nmt": "nmt", ROOT / "plugins": "nmt.plugins", ROOT / "cli": "nmt.cli"}
OUTSIDE_CORE = ("nmt.cli", "nmt.plugins")
LOADS_PLUGINS = "nmt.plugin_loader"  # the one core module that imports nmt.plugins (by walking the package)
# Loading by name, not depending: nmt.plugin_loader finds the built-ins as it finds a --user-dir or an entry point,
# and imports them at run time; the package graph leaves this edge out (a plugin imports the core, never the reverse)
LOADED_BY_NAME = {(LOADS_PLUGINS, "nmt.plugins")}
# package -> package imports allowed although they close a cycle, each with the reason; keep it empty
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    for folder, package in SOURCES.items():
        if path.is_relative_to(folder):
            parts = (*package.split("."), *path.relative_to(folder).with_suffix("").parts)
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(path)


def source_files() -> dict[str, Path]:
    return {module_name(p): p for folder in SOURCES for p in folder.rglob("*.py")}


def imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every dotted name an import statement of ``tree`` may load (``from a import b``: ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of nmt (core, plugins, cli) it imports."""
    files = source_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = set()
        for name in imported_names(tree, module, path.name == "__init__.py"):
            while name and name not in files:  # "nmt.x.func" -> the module "nmt.x" that defines it
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def package_of(module: str) -> str:
    """The node of the package graph: ``nmt.data.dictionary`` -> ``nmt.data``, ``nmt.plugins.bpe.x`` ->
    ``nmt.plugins``, ``nmt.errors`` -> ``nmt.errors``; ``nmt`` (its ``__init__``) stays ``nmt``."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the other packages its modules import."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        own = package_of(module)
        packages.setdefault(own, set()).update(package_of(t) for t in targets)
    for own, targets in packages.items():
        targets.discard(own)
        targets.difference_update(t for t in set(targets) if (own, t) in LOADED_BY_NAME)
    return packages


def without_allowed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {node: {t for t in targets if (node, t) not in ALLOWED_CYCLE_EDGES} for node, targets in graph.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search with the current path kept)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def levels(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's level in an acyclic graph: 1 when it imports nothing of the graph, else one above the highest
    node it imports."""
    level: dict[str, int] = {}

    def of(node: str) -> int:
        if node not in level:
            level[node] = 0  # on the path: a cycle (find_cycle reports it) must not recurse forever
            level[node] = 1 + max((of(t) for t in graph.get(node, ())), default=0)
        return level[node]

    for node in graph:
        of(node)
    return level


def package_levels(graph: dict[str, set[str]] | None = None) -> str:
    """The package graph as text, from the ground up: ``level N: package (-> what it imports), ...``."""
    packages = package_graph(graph if graph is not None else import_graph())
    level = levels(without_allowed(packages))
    lines = []
    for n in range(1, max(level.values(), default=0) + 1):
        lines.append(f"level {n}:")
        for package in sorted(p for p in level if level[p] == n):
            imports = ", ".join(t.removeprefix("nmt.") for t in sorted(packages[package]))
            lines.append(f"  {package}" + (f" -> {imports}" if imports else ""))
    for edge, reason in sorted(ALLOWED_CYCLE_EDGES.items()):
        lines.append(f"allowed against the levels: {edge[0]} -> {edge[1]} ({reason})")
    return "\n".join(lines)


def test_the_graph_sees_the_core_the_plugins_and_the_cli():
    graph = import_graph()
    assert "nmt" in graph and "nmt.checkpoint.format" in graph and "nmt.training.loop" in graph
    assert "nmt.checkpoint.manager" in graph["nmt.training.loop"]
    assert "nmt.plugins.optimizers.adam" in graph and "nmt.cli.train" in graph
    assert "nmt.training.optimizer" in graph["nmt.plugins.optimizers.adam"]
    packages = package_graph(graph)
    assert "nmt.training" in packages["nmt.plugins"] and "nmt.checkpoint" in packages["nmt.training"]


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": set(), "c": {"a", "b"}}, None),
])
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


def test_relative_imports_are_resolved():
    tree = ast.parse("from .format import x\nfrom .. import errors\n")
    assert imported_names(tree, "nmt.checkpoint.manager", False) == {
        "nmt.checkpoint.format", "nmt.checkpoint.format.x", "nmt", "nmt.errors"}


def test_a_lazy_import_between_packages_is_a_package_edge_and_levels_follow_it():
    graph = {"nmt.errors": set(), "nmt.data.a": {"nmt.errors"}, "nmt.data.b": set(),
             "nmt.generation.x": {"nmt.data.a"}, "nmt.data.c": {"nmt.generation.x"}}
    packages = package_graph(graph)
    assert packages == {"nmt.errors": set(), "nmt.data": {"nmt.errors", "nmt.generation"},
                        "nmt.generation": {"nmt.data"}}
    assert find_cycle(packages) == ["nmt.data", "nmt.generation", "nmt.data"]
    del graph["nmt.data.c"]
    assert levels(package_graph(graph)) == {"nmt.errors": 1, "nmt.data": 2, "nmt.generation": 3}
    assert package_levels(graph).splitlines()[-1] == "  nmt.generation -> data"
    lazy = ast.parse("def f():\n    from nmt.generation.x import y\n")
    assert "nmt.generation.x" in imported_names(lazy, "nmt.data.c", False)


def test_no_import_cycle_between_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_between_packages():
    graph = import_graph()
    cycle = find_cycle(without_allowed(package_graph(graph)))
    assert cycle is None, ("import cycle between packages: " + " -> ".join(cycle)
                           + "\n" + package_levels(graph))


def test_the_core_never_imports_a_plugin_or_the_cli():
    graph = import_graph()
    wrong = sorted(f"{module} -> {target}" for module, targets in graph.items() if not module.startswith(OUTSIDE_CORE)
                   for target in targets if target.startswith(OUTSIDE_CORE)
                   and not (module == LOADS_PLUGINS and target == "nmt.plugins"))
    assert not wrong, "the core imports a plugin or the cli: " + "; ".join(wrong) + "\n" + package_levels(graph)


def test_the_allowed_cycle_edges_are_still_there():
    packages = package_graph(import_graph())
    gone = [edge for edge in ALLOWED_CYCLE_EDGES if edge[1] not in packages.get(edge[0], set())]
    assert not gone, f"remove these from ALLOWED_CYCLE_EDGES, the imports are gone: {gone}"


def test_the_checkpoint_package_does_not_import_training():
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith("nmt.checkpoint"):
            assert not [t for t in targets if t.startswith("nmt.training")], module


def test_print_the_package_levels():
    """Shown with ``pytest -s``: the packages from the ground up, as docs/architecture.md describes them."""
    text = package_levels()
    print("\n" + text)
    assert text.startswith("level 1:") and "nmt.errors" in text.split("level 2:")[0]
