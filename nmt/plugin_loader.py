"""Finding plugins: built-ins, a user's ``--user-dir`` folder, and installed entry points.

Loading is explicit: a command calls :func:`load_plugins` once, before it builds anything.
Code from a user folder is only imported when the user names that folder.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import pkgutil
import sys
from importlib.metadata import entry_points
from pathlib import Path

from nmt.errors import ConfigError, UsageError

ENTRY_POINT_GROUP = "nmt.plugins"

_loaded_user_dirs: dict[str, str] = {}  # resolved folder -> module name it was imported as
_builtins_loaded = False
_entry_points_loaded = False


def load_builtin_plugins(kinds: tuple[str, ...] | None = None) -> None:
    """Import every module under ``nmt.plugins`` so that the built-ins register themselves.

    ``kinds`` (sub-package names such as ``("tokenizers", "bpe")``) limits the import to those
    folders, so a command that needs no model plugins does not pay for importing torch."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    import nmt.plugins as package

    prefixes = None if kinds is None else tuple(f"nmt.plugins.{k}" for k in kinds)
    for info in pkgutil.walk_packages(package.__path__, prefix="nmt.plugins."):
        if prefixes is None or info.name.startswith(prefixes):
            importlib.import_module(info.name)
    _builtins_loaded = kinds is None


def load_entry_point_plugins() -> None:
    """Import the modules that installed packages declare in the ``nmt.plugins`` entry-point group."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except ConfigError:
            raise
        except Exception as e:  # a broken third-party package must be named, not dumped
            raise ConfigError(
                f'plugin package entry point "{ep.name} = {ep.value}" failed to load: {type(e).__name__}: {e}'
            ) from e


def import_user_dir(user_dir: str | Path) -> str:
    """Import every module of ``user_dir`` (a folder of .py files, or a package) once.

    The folder is imported as a package named after it, so its modules may import each other
    relatively. Returns the package name it was imported under."""
    path = Path(user_dir).expanduser()
    if not path.is_dir():
        raise UsageError(f"--user-dir {user_dir}: no such folder; give the folder that holds your plugin .py files")
    resolved = str(path.resolve())
    if resolved in _loaded_user_dirs:
        return _loaded_user_dirs[resolved]
    package = f"nmt_user_dir_{len(_loaded_user_dirs)}_{path.resolve().name.replace('-', '_')}"
    init = path / "__init__.py"
    if init.exists():
        spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[resolved])
    else:  # a plain folder of .py files: a package with no __init__ (spec_from_file_location gives None)
        spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        spec.submodule_search_locations = [resolved]
    if spec is None:
        raise UsageError(f"--user-dir {user_dir}: cannot be imported as a package")
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    try:
        if init.exists():
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        for info in sorted(pkgutil.iter_modules([resolved]), key=lambda i: i.name):
            importlib.import_module(f"{package}.{info.name}")
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"--user-dir {user_dir}: importing it failed: {type(e).__name__}: {e}") from e
    _loaded_user_dirs[resolved] = package
    return package


def load_plugins(user_dir: str | Path | None = None, kinds: tuple[str, ...] | None = None) -> None:
    """Make every plugin available: built-ins, entry points, then the user's folder if given."""
    load_builtin_plugins(kinds)
    load_entry_point_plugins()
    if user_dir:
        import_user_dir(user_dir)
