"""What older configs spelled differently, and how a checkpoint's format-1 config becomes today's.

Format 1 (nmt before the one plugin contract) stored ``model.arch``, ``model.attention`` and the
per-site / per-side plugin choices as bare names, the restricted attention's window as
``model.attention_window``, and the position limits twice (``task.*`` and ``model.*``, the task's
winning). Format 2 stores plugin groups ``{"name": ..., **options}`` and the limits in the model only.
"""

from __future__ import annotations

from typing import Any

# Old key -> its new spelling, for the one-line error a YAML file or key=value override gets.
MOVED_KEYS: dict[str, str] = {
    "model.attention_window": "model.attention.attention_window (--attention-window; per site "
                              "--encoder-attention-window, --decoder-attention-window)",
    "attention_window": "model.attention.attention_window (--attention-window)",
    "task.max_source_positions": "model.max_source_positions (--max-source-positions)",
    "task.max_target_positions": "model.max_target_positions (--max-target-positions)",
    "precision.fp16_scaler_on_cpu": "gone: --fp16 needs CUDA",
}

_DEFAULT_POSITIONS = 1024
_V1_GROUPS = {"attention": "scaled_dot_product", "positional": "sinusoidal"}


def upgrade_model_config_v1(model: dict[str, Any]) -> dict[str, Any]:
    """A format-1 model config as format 2: plugin names become groups, the restricted window moves
    into the groups that use it, and a position limit of 0 ("no limit" in training) becomes the default."""
    model = dict(model)
    window = model.pop("attention_window", None)
    if isinstance(model.get("arch"), str):
        model["arch"] = {"name": model["arch"]}
    for kind, default in _V1_GROUPS.items():
        sites = ("encoder", "decoder", "cross") if kind == "attention" else ("encoder", "decoder")
        for key, fallback in [(kind, default)] + [(f"{site}_{kind}", None) for site in sites]:
            value = model.get(key, fallback)
            if isinstance(value, dict):
                continue
            group: dict[str, Any] = {"name": value}
            if value == "restricted" and window is not None:
                group["attention_window"] = int(window)
            model[key] = group
    for side in ("source", "target"):
        key = f"max_{side}_positions"
        if not model.get(key):
            model[key] = _DEFAULT_POSITIONS
    return model


def upgrade_config_v1(config: dict[str, Any]) -> dict[str, Any]:
    """A format-1 full config (``state["config"]``) as format 2."""
    config = dict(config)
    model = dict(config.get("model") or {})
    task = dict(config.get("task") or {})
    for side in ("source", "target"):  # format 1 copied the task's limits into the model when training
        value = task.pop(f"max_{side}_positions", None)
        if value and f"max_{side}_positions" not in model:
            model[f"max_{side}_positions"] = value
    if "task" in config:
        config["task"] = task
    if "model" in config:
        config["model"] = upgrade_model_config_v1(model)
    if isinstance(config.get("precision"), dict):
        config["precision"] = {k: v for k, v in config["precision"].items() if k != "fp16_scaler_on_cpu"}
    return config
