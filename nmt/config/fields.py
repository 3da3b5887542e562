"""Field helpers for the config dataclasses.

Every config value is declared once, in a dataclass, with its default and help text. The
command-line flags are generated from these declarations (see ``nmt.config.cli_options``), so
there is no second parser and no second copy of a default.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def opt(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | None = None,
        choices: list[str] | None = None, cli: bool = True, default_factory: Any = dataclasses.MISSING,
        group: str | None = None) -> Any:
    """A config field with its help text.

    ``flag`` overrides the generated flag name (``--field-name``); ``cli=False`` keeps a field off
    the command line (YAML / ``key=value`` only); ``group`` names the ``--help`` section."""
    metadata = {"help": help, "flag": flag, "choices": choices, "cli": cli, "group": group}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def plugin_group(registry: str, default_name: str, help: str, flag: str | None = None,
                 group: str | None = None) -> Any:
    """A config field holding a plugin choice and that plugin's own options: ``{"name": ..., ...}``.

    ``registry`` is the registry's kind (``"optimizer"``). The plugin's options are validated against its config dataclass when the config is resolved."""
    return dataclasses.field(
        default_factory=lambda: {"name": default_name},
        metadata={"help": help, "flag": flag, "plugin_group": registry, "cli": True, "group": group},
    )
