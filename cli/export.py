"""Turn a trained model into one self-contained folder (nmt-export DATA --path CKPT --output MODEL_DIR):
safetensors weights, config, dictionaries, tokenizer and BPE codes, and a model card; or, with
--format ctranslate2, a folder CTranslate2 runs."""

from __future__ import annotations

import click

from nmt.cli.common import config_command
from nmt.config.export import ExportJob
from nmt.errors import UsageError


def run(cfg: ExportJob) -> None:
    from nmt.data.data_dir import resolve_destdir
    from nmt.generation.loading import checkpoint_paths

    if not cfg.output:
        raise UsageError("--output DIR is required: the model folder to write")
    resolve_destdir(cfg.output, "--output")  # at once: not the root, not a file, not under a file
    paths = checkpoint_paths(cfg.path)
    if cfg.format == "ctranslate2":
        _export_ctranslate2(cfg, paths, cfg.output)
        return
    from nmt.model_folder.export import export_model_folder
    from nmt.model_folder.layout import is_model_folder
    from nmt.model_folder.output import files_kept

    if any(is_model_folder(p) for p in paths):
        raise UsageError(f"--path {cfg.path}: already a model folder; --format nmt exports checkpoints "
                         "(copy the folder, or use --format ctranslate2)")
    if cfg.quantization:
        raise UsageError("--quantization applies to --format ctranslate2; for a smaller nmt folder use --bf16")
    if not cfg.data:
        raise UsageError("DATA is required: the data-bin the checkpoint was trained on")
    out = export_model_folder(paths, cfg.data, cfg.output, bf16=cfg.bf16, scores=cfg.scores, force=cfg.force,
                              source_lang=cfg.source_lang, target_lang=cfg.target_lang)
    click.echo(f"exported {', '.join(paths)} into {out} (load it with nmt.load, nmt-serve or nmt-interactive)")
    kept = files_kept(out)
    if kept:
        click.echo(f"left {', '.join(kept[:6])}{', ...' if len(kept) > 6 else ''} in {out} as they were (nmt-export "
                   "did not write them)")


def _export_ctranslate2(cfg: ExportJob, paths: list[str], output: str) -> None:
    from nmt.data.data_bin import open_data_dir
    from nmt.generation.loading import load_model, model_and_data
    from nmt.interop.ctranslate2_export import export_ctranslate2

    if len(paths) > 1:
        raise UsageError("--format ctranslate2 exports one model: average the checkpoints first "
                         "(nmt-average-checkpoints) or export them as an nmt folder")
    if cfg.bf16 or cfg.scores or cfg.force:
        raise UsageError("--bf16, --scores and --force apply to --format nmt; for CTranslate2 use --quantization "
                         "and a new (or empty) --output folder")
    data, path = model_and_data(cfg.data, paths[0])
    if not data:
        raise UsageError("DATA is required: the data-bin the checkpoint was trained on (or give a model folder "
                         "as --path)")
    assert path is not None
    folder = open_data_dir(data, cfg.source_lang, cfg.target_lang)
    model = load_model(path, folder.src_dict, folder.tgt_dict)
    out = export_ctranslate2(model, folder.src_dict, folder.tgt_dict, output, quantization=cfg.quantization)
    click.echo(f"exported {path} into {out} for CTranslate2 (ctranslate2.Translator(\"{out}\"); give it BPE'd "
               "tokens followed by </s>)")


main = config_command("nmt-export", ExportJob, run, help=__doc__, arguments={"data": "data"})
