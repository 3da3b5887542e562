"""Turn a trained model into one self-contained folder (nmt-export DATA --path CKPT --output MODEL_DIR):
safetensors weights, config, dictionaries, tokenizer and BPE codes, and a model card; or, with
--format ctranslate2, a folder CTranslate2 runs."""

from __future__ import annotations

from pathlib import Path

import click

from nmt.cli.common import config_command
from nmt.config.export import ExportJob
from nmt.errors import UsageError


def run(cfg: ExportJob) -> None:
    from nmt.data.data_dir import resolve_destdir
    from nmt.engines.export import parse_with
    from nmt.generation.loading import checkpoint_paths
    from nmt.model_folder.layout import is_model_folder

    names = parse_with(cfg.engines) if cfg.engines is not None else []
    if names and cfg.format == "ctranslate2":
        raise UsageError("--with adds engines to an nmt model folder; --format ctranslate2 writes a CTranslate2 "
                         "folder alone: drop one of them (--with ctranslate2 puts one inside the model folder)")
    if cfg.compiled_precision != "auto" and "compiled" not in names:
        raise UsageError(f"--compiled-precision {cfg.compiled_precision}: applies to --with compiled; add it to --with "
                         "or drop the option")
    if cfg.onnx_precision != "both" and "onnx" not in names:
        raise UsageError(f"--onnx-precision {cfg.onnx_precision}: applies to --with onnx; add it to --with or drop the "
                         "option")
    if names and cfg.path and is_model_folder(cfg.path):
        _add_engines(cfg, cfg.path, names)
        return
    if not cfg.output:
        raise UsageError("--output DIR is required: the model folder to write")
    resolve_destdir(cfg.output, "--output")  # at once: not the root, not a file, not under a file
    paths = checkpoint_paths(cfg.path)
    if cfg.format == "ctranslate2":
        _export_ctranslate2(cfg, paths, cfg.output)
        return
    from nmt.model_folder.export import export_model_folder
    from nmt.model_folder.output import files_kept

    if any(is_model_folder(p) for p in paths):
        raise UsageError(f"--path {cfg.path}: already a model folder; --format nmt exports checkpoints "
                         "(copy the folder, add engines to it with --with, or use --format ctranslate2)")
    if cfg.quantization:
        raise UsageError("--quantization applies to --format ctranslate2; for a smaller nmt folder use --bf16")
    if not cfg.data:
        raise UsageError("DATA is required: the data-bin the checkpoint was trained on")
    engines = None
    if names:
        from nmt.data.data_bin import open_data_dir
        from nmt.engines.export import engine_writer, export_choices, marker_files

        data = open_data_dir(cfg.data, cfg.source_lang, cfg.target_lang)
        choices = export_choices(cfg.compiled_precision, cfg.onnx_precision)
        engines = engine_writer(names, data.src_dict, data.tgt_dict, choices)
    out = export_model_folder(paths, cfg.data, cfg.output, bf16=cfg.bf16, scores=cfg.scores, force=cfg.force,
                              source_lang=cfg.source_lang, target_lang=cfg.target_lang, engines=engines,
                              engine_files=marker_files(names) if names else ())
    with_engines = f" with {', '.join(f'{n}/' for n in names)}" if names else ""
    click.echo(f"exported {', '.join(paths)} into {out}{with_engines} (load it with nmt.load, nmt-serve or "
               "nmt-interactive)")
    kept = files_kept(out)
    if kept:
        click.echo(f"left {', '.join(kept[:6])}{', ...' if len(kept) > 6 else ''} in {out} as they were (nmt-export "
                   "did not write them)")


def _add_engines(cfg: ExportJob, folder: str, names: list[str]) -> None:
    """``--path MODEL_DIR --with NAME``: the engines added to the folder in place."""
    from nmt.engines.export import add_engines, export_choices

    if cfg.output and Path(cfg.output).resolve() != Path(folder).resolve():
        raise UsageError(f"--output {cfg.output}: --with adds engines to the model folder --path {folder} in place; "
                         "drop --output (or give the same folder), or copy the folder first")
    if cfg.bf16 or cfg.scores or cfg.quantization:
        raise UsageError("--bf16, --scores and --quantization apply when a folder is exported from checkpoints; "
                         f"--path {folder} --with adds engines to the folder as it is")
    choices = export_choices(cfg.compiled_precision, cfg.onnx_precision)
    out = add_engines(folder, names, force=cfg.force, choices=choices)
    click.echo(f"added {', '.join(f'{n}/' for n in names)} to {out}")


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
