"""Draw training and validation loss (bits) / perplexity and the learning rate per update from the
JSON log nmt-train writes; several runs are overlaid, one colour and label each.

\b
  nmt-plot checkpoints/m30k --output m30k.png
  nmt-plot runs/sin/train_log.jsonl runs/learned --labels sinusoidal,learned --output pos.png

Needs matplotlib: pip install 'nmt[plot]'.
"""

from __future__ import annotations

import sys

import click

from nmt.cli.common import config_command
from nmt.config.cli_options import flag_specs
from nmt.config.plot import PlotJob
from nmt.errors import UsageError


def _split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _warn(message: str) -> None:
    click.echo(f"nmt-plot: warning: {message}", err=True)


def run(job: PlotJob) -> None:
    from nmt.plotting import default_labels, draw, log_path, read_log, run_curves

    cfg = job.plot
    paths = [log_path(p) for p in _split(cfg.logs)]
    if not paths:
        raise UsageError("no training log given: nmt-plot RUN_DIR_OR_train_log.jsonl [...] --output x.png")
    labels = _split(cfg.labels) or default_labels(paths)
    if len(labels) != len(paths):
        raise UsageError(f"--labels gives {len(labels)} label(s) for {len(paths)} log(s); give one per log")
    runs = [run_curves(read_log(p, _warn), label, cfg.valid_subset) for p, label in zip(paths, labels)]
    out = draw(runs, cfg.output, linear_ppl=cfg.linear_ppl, title=cfg.title, dpi=cfg.dpi)
    click.echo(f"wrote {out} ({len(runs)} run{'s' if len(runs) > 1 else ''})")


def logs_as_flag(argv: list[str]) -> list[str]:
    """Positional log paths (any number) become one ``--logs a,b``: click allows only one
    variadic argument, and that one holds the trailing key=value overrides."""
    takes_value = {s.flag for s in flag_specs(PlotJob) if s.type != "bool"} | {"--config"}
    rest: list[str] = []
    logs: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in takes_value and i + 1 < len(argv):
            if arg == "--logs":
                logs += _split(argv[i + 1])
            else:
                rest += argv[i:i + 2]
            i += 2
            continue
        (rest if arg.startswith("-") or "=" in arg else logs).append(arg)
        i += 1
    return rest + (["--logs", ",".join(logs)] if logs else [])


_command = config_command("nmt-plot", PlotJob, run, help=__doc__, plugin_kinds=())


def main(argv: list[str] | None = None) -> None:
    _command(logs_as_flag(list(sys.argv[1:] if argv is None else argv)))


main.nmt_schema = PlotJob  # type: ignore[attr-defined]

if __name__ == "__main__":
    main()
