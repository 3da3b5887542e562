"""The repository's own scripts (scripts/*.py), imported as modules for tests."""

from pathlib import Path
from types import ModuleType

from example_scripts import load_module

ROOT = Path(__file__).resolve().parent.parent


def load_gen_docs() -> ModuleType:
    """scripts/gen_docs.py as a module (scripts/ is not a package)."""
    return load_module(ROOT / "scripts" / "gen_docs.py")
