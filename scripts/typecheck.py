#!/usr/bin/env python3
"""mypy over nmt/, cli/ and plugins/, each file under the module name it is installed as, and over benchmarks/
and studies/

pyproject.toml installs cli/ as nmt.cli and plugins/ as nmt.plugins ([tool.setuptools] package-dir).
mypy names a file after its folders (cli/generate.py would be `cli.generate`) and does not follow the
editable install's import hook, so on its own it cannot resolve `from nmt.cli.common import ...`.
This script reads that package-dir map, hands mypy every file under its installed name, and checks
with the [tool.mypy] settings of pyproject.toml: it is `mypy nmt cli plugins` with the right names.

Usage (from anywhere): python scripts/typecheck.py [mypy options]
Exit status as mypy's: 0 clean, 1 type errors, 2 a blocking error (a syntax error, a bad option).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy itself depends on tomli before Python 3.11
    import tomli as tomllib

from mypy import build
from mypy.errors import CompileError
from mypy.fscache import FileSystemCache
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent
# packages run from the repository's root (python -m benchmarks), not installed
RUN_FROM_ROOT = ("benchmarks", "studies")


def package_dirs() -> dict[Path, str]:
    """{folder: package} for the top of each folder pyproject.toml maps (nmt/ -> nmt, cli/ -> nmt.cli, ...)."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {(ROOT / folder).resolve(): package for package, folder in mapping.items()}


def installed_name(path: str, roots: dict[Path, str]) -> str | None:
    """cli/generate.py -> nmt.cli.generate; None outside the mapped folders."""
    file = Path(path).resolve()
    for folder, package in roots.items():
        if file.is_relative_to(folder):
            parts = file.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join((package, *parts))
    return None


def main(argv: list[str]) -> int:
    os.chdir(ROOT)  # mypy reads [tool.mypy] from the pyproject.toml of the working directory
    roots = package_dirs()
    folders = [*sorted(str(folder.relative_to(ROOT)) for folder in roots), *RUN_FROM_ROOT]
    fscache = FileSystemCache()
    sources, options = process_options([*argv, *folders], fscache=fscache)
    renamed = []
    for source in sources:
        module = installed_name(source.path, roots) if source.path else None
        renamed.append(BuildSource(source.path, module or source.module, source.text, str(ROOT)))
    try:
        messages = build.build(renamed, options, fscache=fscache).errors
        blocking = False
    except CompileError as error:
        messages, blocking = error.messages, True
    for message in messages:
        print(message)
    errors = [m for m in messages if ": error:" in m]
    files = {m.split(":", 1)[0] for m in errors}
    if errors or blocking:
        print(f"Found {len(errors)} error{'s' * (len(errors) != 1)} in {len(files)} file{'s' * (len(files) != 1)} "
              f"(checked {len(renamed)} source files)")
        return 2 if blocking else 1
    print(f"Success: no issues found in {len(renamed)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
