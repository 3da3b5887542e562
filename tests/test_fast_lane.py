"""The fast lane (`pytest -m "not slow"`, CONTRIBUTING.md) still touches every part of nmt: each package and
top-level module of nmt/, each command of cli/ and each plugin kind of plugins/ is imported by code that a test
not marked slow runs (its test file, or a helper module of tests/ that file imports), or, for a command or a
plugin kind, named there: `nmt-train` run as a console script, `adam` given to --optimizer. Marking a file slow
must not leave a part of nmt tested only by CI. The test files are read with ast, not imported."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def is_slow(test: ast.AST) -> bool:
    """A test function marked `@pytest.mark.slow`."""
    return isinstance(test, ast.FunctionDef) and any("mark.slow" in ast.unparse(d) for d in test.decorator_list)


def is_slow_file(body: list[ast.stmt]) -> bool:
    """`pytestmark = pytest.mark.slow` (or a list holding it) at the top of a test file."""
    return any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
               and "mark.slow" in ast.unparse(node.value) for node in body)


@cache
def fast_code(path: Path) -> tuple[bool, tuple[ast.stmt, ...]]:
    """Whether the file has a test the fast lane runs, and the top-level statements that code may run:
    all of them but the tests marked slow (only the imports when the whole file is slow)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if is_slow_file(body):
        return False, tuple(node for node in body if isinstance(node, (ast.Import, ast.ImportFrom)))
    kept = tuple(node for node in body if not is_slow(node))
    return any(isinstance(node, ast.FunctionDef) and node.name.startswith("test") for node in kept), kept


@cache
def written(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The modules imported and the string tokens (split at spaces, "=" and ",") in the fast code of `path`."""
    modules: set[str] = set()
    tokens: set[str] = set()
    for node in (n for top in fast_code(path)[1] for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            tokens.update(re.split(r"[\s=,]+", node.value))
    return frozenset(modules), frozenset(tokens)


def fast_reach() -> tuple[set[str], set[str]]:
    """What the fast tests reach: `written` by each test file with a fast test and by the tests/ helper modules
    it imports, and by theirs (a helper's imports count: the test runs them)."""
    todo = [path for path in sorted(TESTS.glob("test_*.py")) if fast_code(path)[0]]
    seen = set(todo)
    modules: set[str] = set()
    tokens: set[str] = set()
    while todo:
        more_modules, more_tokens = written(todo.pop())
        modules |= more_modules
        tokens |= more_tokens
        helpers = {TESTS / (m.split(".")[0] + ".py") for m in more_modules}
        todo += [h for h in helpers - seen if h.is_file()]
        seen |= helpers
    return modules, tokens


def plugin_names(kind: Path) -> set[str]:
    """The names a plugin kind registers (`@register_optimizer("adam")`); "none" is too common a word to count."""
    names = set()
    for path in kind.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("register_") and node.args
                    and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names - {"none"}


def parts() -> list[tuple[str, set[str]]]:
    """Each part of nmt with the module that is it and, for commands and plugin kinds, the names that call it."""
    found = [(f"nmt.{p.name}", set()) for p in sorted((ROOT / "nmt").iterdir())
             if (p / "__init__.py").is_file()]
    found += [(f"nmt.{p.stem}", set()) for p in sorted((ROOT / "nmt").glob("*.py")) if p.stem != "__init__"]
    found += [(f"nmt.cli.{p.stem}", {"nmt-" + p.stem.replace("_", "-")}) for p in sorted((ROOT / "cli").glob("*.py"))
              if p.stem not in ("__init__", "common")]
    found += [(f"nmt.plugins.{p.name}", plugin_names(p)) for p in sorted((ROOT / "plugins").iterdir())
              if (p / "__init__.py").is_file()]
    return found


# Shared helpers of nmt that no test imports by name: reached through a module that imports them.
REACHED_THROUGH = {"nmt.lru": "nmt.api", "nmt.bounded_read": "nmt.checkpoint.safe_read",
                   "nmt.signals": "nmt.data.epoch_iterator"}


def test_every_part_of_nmt_is_reached_by_a_test_the_fast_lane_runs():
    modules, tokens = fast_reach()

    def imported(module: str) -> bool:
        return any(m == module or m.startswith(module + ".") for m in modules)

    missed = [part for part, names in parts()
              if not (imported(part) or names & tokens or imported(REACHED_THROUGH.get(part, "-")))]
    assert not missed, ("only tests marked slow reach these parts of nmt: leave one of their tests in the fast "
                        "lane (CONTRIBUTING.md), or for a shared helper no test imports, add the module it is "
                        "reached through to REACHED_THROUGH: " + ", ".join(missed))


def test_the_parts_are_found():
    found = {part for part, _ in parts()}
    assert {"nmt.checkpoint", "nmt.api", "nmt.cli.train", "nmt.plugins.optimizers"} <= found
    assert set(REACHED_THROUGH) <= found


@pytest.mark.parametrize(("helper", "user"), REACHED_THROUGH.items())
def test_a_helper_is_imported_by_the_module_it_is_reached_through(helper, user):
    assert f"from {helper} import" in (ROOT / (user.replace(".", "/") + ".py")).read_text(encoding="utf-8")
