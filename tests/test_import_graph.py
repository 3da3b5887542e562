"""The core package imports without cycles: a cycle means two modules that cannot be understood (or
loaded) one without the other, and hiding one behind a lazy import or a module ``__getattr__`` only
moves the failure. The graph is read from the source files with ``ast`` (nothing is imported), every
import statement counts, at module level or inside a function. ``nmt.cli`` and ``nmt.plugins``
(the ``cli/`` and ``plugins/`` folders) sit outside the core and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

NMT = Path(__file__).resolve().parents[1] / "nmt"
OUTSIDE_CORE = ("nmt.cli", "nmt.plugins")


def module_name(path: Path) -> str:
    parts = path.relative_to(NMT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
    """module -> the core modules it imports."""
    files = {module_name(p): p for p in NMT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = set()
        for name in imported_names(tree, module, path.name == "__init__.py"):
            if name.startswith(OUTSIDE_CORE):  # before "nmt.plugins" is cut down to "nmt", which it is not
                continue
            while name and name not in files:  # "nmt.x.func" -> the module "nmt.x" that defines it
                name = name.rpartition(".")[0]
            if name and name != module and not name.startswith(OUTSIDE_CORE):
                targets.add(name)
        graph[module] = targets
    return graph


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


def test_the_graph_sees_the_core_and_its_imports():
    graph = import_graph()
    assert "nmt" in graph and "nmt.checkpoint.format" in graph and "nmt.training.loop" in graph
    assert "nmt.checkpoint.manager" in graph["nmt.training.loop"]
    assert not any(t.startswith(OUTSIDE_CORE) for targets in graph.values() for t in targets)


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


def test_no_import_cycle_in_nmt():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checkpoint_package_does_not_import_training():
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith("nmt.checkpoint"):
            assert not [t for t in targets if t.startswith("nmt.training")], module
