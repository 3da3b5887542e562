"""Average the parameters of several checkpoints of one run into a new checkpoint
(nmt-average-checkpoints --inputs DIR --num-epoch-checkpoints 5 --output avg.pt)."""

from __future__ import annotations

from pathlib import Path

import click

from nmt.cli.common import config_command
from nmt.config.generate import AverageJob
from nmt.errors import UsageError


def run(cfg: AverageJob) -> None:
    from nmt.checkpoint.averaging import COUNT_FLAGS, last_checkpoints, write_average

    if not cfg.output:
        raise UsageError("--output FILE is required: where to write the averaged checkpoint")
    items = [p for p in (cfg.inputs or "").replace(",", ":").split(":") if p]
    if not items:
        raise UsageError(f"--inputs is required: checkpoint files joined by ':', or one folder with {COUNT_FLAGS}")
    counts = (cfg.num_epoch_checkpoints, cfg.num_update_checkpoints, cfg.num_progress_checkpoints)
    by_count = any(n is not None for n in counts)
    paths: list[str] | list[Path]
    if by_count:
        if len(items) != 1:
            raise UsageError(f"{COUNT_FLAGS} take one folder in --inputs")
        paths = last_checkpoints(items[0], *counts)
    else:
        folders = [p for p in items if Path(p).is_dir()]
        if folders:
            raise UsageError(f"--inputs {folders[0]} is a folder: add {COUNT_FLAGS}, or list the checkpoint files")
        paths = items
    out = write_average(paths, cfg.output)
    click.echo(f"averaged {len(paths)} checkpoints ({', '.join(p if isinstance(p, str) else p.name for p in paths)})"
               f" into {out}")


main = config_command("nmt-average-checkpoints", AverageJob, run, help=__doc__)
