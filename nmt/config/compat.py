"""Config layouts of older checkpoints brought to today's layout (checkpoint format 1 -> 2).

Placeholder: filled in by the plugin-contract change. Until then format 1's layout is today's, so
both functions return their argument unchanged; the checkpoint migration already calls them."""

from __future__ import annotations

from typing import Any


def upgrade_config_v1(config: dict[str, Any]) -> dict[str, Any]:
    """A full resolved config of format 1 (``state["config"]``) in today's layout; filled in by the
    plugin-contract change."""
    return config


def upgrade_model_config_v1(model_config: dict[str, Any]) -> dict[str, Any]:
    """A model config of format 1 (``state["model_config"]``) in today's layout; filled in by the
    plugin-contract change."""
    return model_config
