"""Bring fairseq data and models over: ``nmt-import-fairseq data`` converts a fairseq data-bin into
ours losslessly; ``nmt-import-fairseq checkpoint`` converts a fairseq Transformer checkpoint into an
nmt checkpoint that nmt-generate translates with exactly as fairseq-generate does (docs/fairseq.md)."""

from __future__ import annotations

import sys

import click

from nmt.cli.common import config_command
from nmt.errors import UsageError
from nmt.interop.import_config import ImportCheckpointJob, ImportDataJob

PROG = "nmt-import-fairseq"


def _required(value: str | None, flag: str, what: str) -> str:
    if not value:
        raise UsageError(f"{flag} is required: {what}")
    return value


def run_data(cfg: ImportDataJob) -> None:
    from nmt.interop.fairseq_data import convert_data_bin

    path = _required(cfg.path, "--path", "the fairseq data-bin folder")
    output = _required(cfg.output, "--output", "the nmt data-bin folder to write")
    meta = convert_data_bin(path, output, source_lang=cfg.source_lang, target_lang=cfg.target_lang,
                            tokenizer=cfg.tokenizer, bpe=cfg.bpe, bpe_codes=cfg.bpe_codes, overwrite=cfg.overwrite)
    splits = ", ".join(f"{name} ({info[meta['source_lang']]['sentences']} sentences)"
                       for name, info in meta["splits"].items())
    click.echo(f"{PROG}: {meta['source_lang']}-{meta['target_lang']} data-bin written to {output}: {splits}")


def run_checkpoint(cfg: ImportCheckpointJob) -> None:
    from nmt.interop.fairseq_checkpoint import import_checkpoint

    path = _required(cfg.path, "--path", "the fairseq checkpoint, e.g. checkpoint_best.pt")
    data = _required(cfg.data, "--data", "the data-bin the model was trained on")
    output = _required(cfg.output, "--output", "the nmt checkpoint to write")
    import_checkpoint(path, data, output, source_lang=cfg.source_lang, target_lang=cfg.target_lang)
    click.echo(f"{PROG}: {path} imported as {output}; translate with nmt-generate DATA --path {output}")


SUBCOMMANDS = {
    "data": config_command(f"{PROG} data", ImportDataJob, run_data, help=ImportDataJob.__doc__,
                           plugin_kinds=("tokenizers", "bpe")),
    "checkpoint": config_command(f"{PROG} checkpoint", ImportCheckpointJob, run_checkpoint,
                                 help=ImportCheckpointJob.__doc__),
}


def main(argv: list[str] | None = None) -> None:
    """``nmt-import-fairseq {data,checkpoint} ...``: dispatch to the subcommand's own command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        click.echo(f"Usage: {PROG} {{data,checkpoint}} [OPTIONS]\n\n{__doc__}\n\n"
                   f"  data        {ImportDataJob.__doc__}\n  checkpoint  {ImportCheckpointJob.__doc__}\n\n"
                   f"{PROG} SUBCOMMAND --help lists its options.")
        sys.exit(0 if argv else 2)
    if argv[0] not in SUBCOMMANDS:
        click.echo(f"{PROG}: error: unknown subcommand {argv[0]!r}; choose data or checkpoint", err=True)
        sys.exit(2)
    SUBCOMMANDS[argv[0]](argv[1:])
