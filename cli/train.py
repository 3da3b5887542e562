"""`nmt-train DATA_BIN [options]`: train a Transformer on a data-bin written by nmt-preprocess.

Runs as one process, as N local processes (--distributed-world-size N), or as one rank under
torchrun (`torchrun --nproc_per_node N -m nmt.cli.train ...`). `--arch help` or
`--list-plugins` lists the architectures and every other plugin.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from omegaconf import DictConfig

from nmt.cli.common import config_command
from nmt.config.model import arch_preset
from nmt.config.train import TrainJob
from nmt.errors import UsageError
from nmt.registry import REGISTRIES


def plugin_listing() -> str:
    """Every registered plugin by kind, with its one-line help."""
    lines = []
    for kind, registry in REGISTRIES.items():
        if not registry.choices():
            continue
        lines.append(f"{kind} ({registry.option}):")
        for name in registry.choices():
            lines.append(f"  {name:<32} {registry.entry(name).help}")
    return "\n".join(lines)


def _list_and_exit(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        click.echo(plugin_listing())
        ctx.exit(0)


def preset(cfg: DictConfig) -> dict[str, Any] | None:
    """The --arch preset; `--arch help` lists the plugins instead of training."""
    if cfg.model.arch.name in ("help", "list"):
        click.echo(plugin_listing())
        sys.exit(0)
    return arch_preset(cfg)


LIST_PLUGINS = click.Option(["--list-plugins"], is_flag=True, default=False, is_eager=True,
                            callback=_list_and_exit, help="List architectures and every plugin, then exit.")


def run(cfg: TrainJob, list_plugins: bool = False) -> None:
    from nmt.training.budget import check_budget
    from nmt.training.dropout_schedule import check_dropout_schedule
    from nmt.training.loop import train
    from nmt.training.validation_bleu import eval_bleu_options

    if not cfg.task.data:
        raise UsageError("no data: give the data-bin folder nmt-preprocess wrote, "
                         "e.g. nmt-train data-bin/multi30k_en_de")
    eval_bleu_options(cfg)  # a wrong --eval-bleu option stops the run before anything is written
    check_budget(cfg)  # likewise a schedule that follows a budget, or --save-at-progress, without one
    check_dropout_schedule(cfg.model)
    train(cfg)


main = config_command("nmt-train", TrainJob, run, help=__doc__, arguments={"data": "task.data"}, preset=preset,
                      extra_params=[LIST_PLUGINS])

if __name__ == "__main__":
    main()
