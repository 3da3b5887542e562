"""The package map in pyproject.toml must cover every folder of code, and must never install
top-level `cli` / `plugins` modules."""

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TOP = {"nmt": "nmt", "cli": "nmt.cli", "plugins": "nmt.plugins"}


def test_every_code_folder_is_a_listed_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in TOP.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name,) + rel))
    assert found <= listed, f"add to pyproject.toml packages: {sorted(found - listed)}"
    assert not any(p.split(".")[0] in ("cli", "plugins") for p in listed)
