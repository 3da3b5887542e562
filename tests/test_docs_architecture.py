"""docs/architecture.md's layout table keeps up with nmt/: every package and top-level module has a row, and every
import a module makes at module level reaches only the parts of nmt/ its row lists (the direction of imports)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
# | `nmt/data/` | job | imports |   or   | `nmt/fileio.py` | job | imports |
ROW = re.compile(r"^\| `nmt/(\w+)(?:/|\.py)` \|[^|\n]*\|([^|\n]*)\|$", re.M)


def parts_on_disk() -> set[str]:
    """nmt's packages (folders with an __init__.py) and top-level modules, by name."""
    nmt = ROOT / "nmt"
    packages = {p.parent.name for p in nmt.glob("*/__init__.py")}
    modules = {p.stem for p in nmt.glob("*.py")}
    return packages | modules


def rows(page: str, parts: set[str]) -> dict[str, set[str]]:
    """Each layout row's part -> the parts of nmt/ its imports column names."""
    return {part: set(re.findall(r"\w+", imports)) & parts for part, imports in ROW.findall(page)}


def module_level_imports(path: Path) -> set[str]:
    """The dotted names a file imports when it is imported: its top-level import statements, also inside
    top-level try/if blocks, but not under ``if TYPE_CHECKING:`` (those never run)."""
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the file's own package (nmt/...)
                    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
                    anchor = list(package[: len(package) - node.level + 1])
                    base = ".".join(anchor + ([node.module] if node.module else []))
                found.update(f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found


def part_of(path: Path) -> str:
    rel = path.relative_to(ROOT / "nmt")
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_every_package_and_module_of_nmt_has_a_row():
    parts = parts_on_disk()
    listed = rows(PAGE.read_text(encoding="utf-8"), parts)
    missing = sorted(parts - set(listed) - {"__init__"})
    assert not missing, f"docs/architecture.md's layout table has no row for nmt/{', nmt/'.join(missing)}"
    gone = sorted(set(listed) - parts)
    assert not gone, f"docs/architecture.md lists nmt/{', nmt/'.join(gone)}, which no longer exist"


def test_module_level_imports_follow_the_rows():
    parts = parts_on_disk()
    allowed = rows(PAGE.read_text(encoding="utf-8"), parts)
    wrong = []
    for path in sorted((ROOT / "nmt").rglob("*.py")):
        own = part_of(path)
        for name in sorted(module_level_imports(path)):
            words = name.split(".")
            if words[0] != "nmt" or len(words) < 2:
                continue
            target = words[1]
            if target in ("plugins", "cli"):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}: the core never imports cli/ or a plugin")
            elif target in parts and target != own and target not in allowed.get(own, set()):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}, which the row of nmt/{own} does not list")
    assert not wrong, "docs/architecture.md's import directions: " + "; ".join(wrong)


def test_the_checks_see_a_missing_row_and_an_upward_import(tmp_path):
    page = PAGE.read_text(encoding="utf-8")
    parts = parts_on_disk()
    without_serve = re.sub(r"^\| `nmt/serve/` \|.*\n", "", page, flags=re.M)
    assert "serve" in rows(page, parts) and "serve" not in rows(without_serve, parts)
    upward = tmp_path / "upward.py"
    upward.write_text("from typing import TYPE_CHECKING\nimport nmt.errors\n"
                      "if TYPE_CHECKING:\n    import nmt.serve\n"
                      "def later():\n    import nmt.api\n"
                      "try:\n    from nmt.generation import search\nexcept ImportError:\n    pass\n", encoding="utf-8")
    assert module_level_imports(upward) == {"typing.TYPE_CHECKING", "nmt.errors", "nmt.generation.search"}
    assert part_of(ROOT / "nmt" / "data" / "x.py") == "data" and part_of(ROOT / "nmt" / "x.py") == "x"
