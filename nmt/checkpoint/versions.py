"""The checkpoint format version, and the migrations that bring an older file up to it.

A checkpoint records the ``format_version`` it was written with. Loading refuses a newer one
("upgrade nmt") and upgrades an older one in memory, one version at a time, through
:data:`MIGRATIONS` (``{from_version: function}``), so every checkpoint an older nmt wrote still loads.

- 1 -> 2: the config layout of the plugin-contract change (``nmt.config.compat``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from nmt.checkpoint.errors import CheckpointError

FORMAT_VERSION = 2
OLDEST_VERSION = 1


def upgrade_from_v1(state: dict[str, Any]) -> dict[str, Any]:
    """Format 1 -> 2: the stored configs in the layout of the plugin-contract change."""
    from nmt.config.compat import upgrade_config_v1, upgrade_model_config_v1

    state = dict(state)
    if isinstance(state.get("config"), dict):
        state["config"] = upgrade_config_v1(state["config"])
    if isinstance(state.get("model_config"), dict):
        state["model_config"] = upgrade_model_config_v1(state["model_config"])
    state["format_version"] = 2
    return state


MIGRATIONS: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: upgrade_from_v1}


def bring_up_to_date(state: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """``state`` in the current format: refused when newer (or unversioned), migrated when older."""
    version = state.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {version}, newer than this nmt reads "
                              f"({FORMAT_VERSION}); upgrade nmt (pip install -U nmt) to load it")
    if version < OLDEST_VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {version}, which no nmt wrote; "
                              "give a checkpoint written by nmt-train")
    while state["format_version"] < FORMAT_VERSION:
        state = MIGRATIONS[state["format_version"]](state)
    return state
