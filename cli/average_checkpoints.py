"""Average the parameters of several checkpoints of one run into a new checkpoint
(nmt-average-checkpoints --inputs DIR --num-epoch-checkpoints 5 --output avg.pt)."""

from __future__ import annotations

from pathlib import Path

import click

from nmt.cli.common import config_command
from nmt.config.generate import AverageJob
from nmt.errors import UsageError


def run(cfg: AverageJob) -> None:
    from nmt.checkpoint.averaging import last_checkpoints, write_average

    if not cfg.output:
        raise UsageError("--output FILE is required: where to write the averaged checkpoint")
    items = [p for p in (cfg.inputs or "").replace(",", ":").split(":") if p]
    if not items:
        raise UsageError("--inputs is required: checkpoint files joined by ':', or one folder with "
                         "--num-epoch-checkpoints N / --num-update-checkpoints N")
    by_count = cfg.num_epoch_checkpoints is not None or cfg.num_update_checkpoints is not None
    paths: list[str] | list[Path]
    if by_count:
        if len(items) != 1:
            raise UsageError("--num-epoch-checkpoints / --num-update-checkpoints take one folder in --inputs")
        paths = last_checkpoints(items[0], cfg.num_epoch_checkpoints, cfg.num_update_checkpoints)
    else:
        folders = [p for p in items if Path(p).is_dir()]
        if folders:
            raise UsageError(f"--inputs {folders[0]} is a folder: add --num-epoch-checkpoints N or "
                             "--num-update-checkpoints N, or list the checkpoint files")
        paths = items
    out = write_average(paths, cfg.output)
    click.echo(f"averaged {len(paths)} checkpoints ({', '.join(p if isinstance(p, str) else p.name for p in paths)})"
               f" into {out}")


main = config_command("nmt-average-checkpoints", AverageJob, run, help=__doc__)
