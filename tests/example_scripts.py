"""Loading a script that is not in a package (scripts/*.py) as a module in a test, and calling a click entry point
as the shell would."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module(path: Path) -> ModuleType:
    """A script that is not in a package, as a module named after its file (registered in sys.modules:
    dataclasses resolve annotations through it)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def call(module: ModuleType, argv: list) -> int:
    """Run the module's click entry point ``main`` with ``argv``; its exit code."""
    try:
        module.main([str(a) for a in argv])
    except SystemExit as e:
        return e.code or 0
    return 0
