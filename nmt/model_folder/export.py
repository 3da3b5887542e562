"""Write a model folder from checkpoint(s) and the data-bin they were trained on (nmt-export)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

import torch

from nmt.data.metadata import METADATA_FILE
from nmt.errors import UsageError
from nmt.model_folder.layout import CARD, FOLDER_FORMAT, FOLDER_VERSION, MANIFEST, WEIGHTS, sha256_of
from nmt.model_folder.output import check_output, folder_in_place

MODEL_PLUGIN_KINDS = ("arch", "attention", "positional", "criterion")  # what loading and scoring the model need
_BLEU_LINE = re.compile(r"^Generate (\S+) with beam=(\d+): (BLEU = .*)$")
_SIGNATURE_LINE = re.compile(r"^sacreBLEU signature: (\S+)(?: \(detokenized, against (.*)\))?")


def read_scores(path: str) -> dict[str, Any]:
    """The test BLEU and sacreBLEU signature from an nmt-generate output file (``--scores``)."""
    from nmt.data.corpus_files import read_lines

    if not Path(path).is_file():
        raise UsageError(f"--scores {path}: no such file; give the output of nmt-generate (its BLEU and "
                         "sacreBLEU signature lines go into the model card)")
    found: dict[str, Any] = {}
    for line in read_lines(path):
        if (m := _BLEU_LINE.match(line)) is not None:
            found.update(split=m.group(1), beam=int(m.group(2)), bleu=m.group(3))
        elif (m := _SIGNATURE_LINE.match(line)) is not None:
            found["signature"] = m.group(1)
            if m.group(2):
                found["reference"] = m.group(2)
    if "bleu" not in found:
        raise UsageError(f"--scores {path}: no \"Generate SPLIT with beam=N: BLEU = ...\" line; give the output "
                         "of nmt-generate (stdout, or generate-SPLIT.txt from --results-path)")
    return found


def _checkpoint_state(paths: Sequence[str]) -> dict[str, Any]:
    """One checkpoint's state, or the average of several (as nmt-average-checkpoints computes it)."""
    from nmt.checkpoint.averaging import average_checkpoints
    from nmt.checkpoint.format import load_checkpoint

    return load_checkpoint(paths[0]) if len(paths) == 1 else average_checkpoints(paths)


def _stored_tensors(weights: dict[str, torch.Tensor], bf16: bool) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors to write, each tied group once (safetensors stores no shared memory), and
    name -> first name for the tied ones."""
    from nmt.checkpoint.averaging import tied_names

    first_of = tied_names(weights)
    stored = {}
    for name, t in weights.items():
        if first_of[name] == name:
            t = t.detach().to("cpu")
            stored[name] = (t.to(torch.bfloat16) if bf16 and t.is_floating_point() else t).contiguous().clone()
    return stored, {name: first for name, first in first_of.items() if first != name}


def _data_bin_files(data_dir: Path, src: str, tgt: str) -> tuple[dict[str, Any], list[str]]:
    """The data-bin's metadata.json without its splits, and the files to copy (dictionaries, BPE codes)."""
    from nmt.data.metadata import read_metadata
    from nmt.data.text_pipeline import codes_inside

    meta = read_metadata(data_dir)
    langs = list(dict.fromkeys([src, tgt]))
    pipeline = meta["pipeline"]
    codes = {lang: name for lang, name in pipeline["bpe"].get("codes", {}).items() if lang in langs}
    files = [f"dict.{lang}.txt" for lang in langs]
    for lang, name in codes.items():
        codes_inside(data_dir, name, lang)  # refuses codes outside the data-bin
        files.append(name)
    kept = {key: value for key, value in meta.items() if key not in ("splits", "raw_text", "job_fingerprint")}
    kept.update(langs=langs, splits={}, dictionaries={k: v for k, v in meta["dictionaries"].items() if k in langs},
                training_splits=meta["splits"])
    if "codes" in pipeline["bpe"]:  # only the codes of the pair's languages, which are copied
        kept["pipeline"] = {**pipeline, "bpe": {**pipeline["bpe"], "codes": codes}}
    return kept, list(dict.fromkeys(files))


def training_data(data: str | Path, src: str) -> tuple[str, int | None]:
    """(the name of the data the model was trained on, its training sentence pairs) for the card: every shard
    of a sharded DATA (``x/shard0:x/shard1`` is "x (2 shards)"), not only the first, whose dictionaries,
    valid and test splits the folder takes."""
    from nmt.data.data_shards import data_shards
    from nmt.data.metadata import read_metadata

    folders = [Path(s).resolve() for s in data_shards(data)]
    counts: list[int | None] = [((read_metadata(f)["splits"].get("train") or {}).get(src) or {}).get("sentences")
                                for f in folders]
    total = None if any(c is None for c in counts) else sum(c or 0 for c in counts)
    if len(folders) == 1:
        return folders[0].name, total
    parents = {f.parent for f in folders}
    name = f"{folders[0].parent.name} ({len(folders)} shards)" if len(parents) == 1 else \
        ":".join(f.name for f in folders)
    return name, total


# writes a model's engine files into sub-folders of the folder being built, returning their model.json records
# (nmt.model_folder.engine_files); nmt-export --with passes nmt.engines.export's
EngineWriter = Callable[[torch.nn.Module, Path], list[dict[str, Any]]]


def export_model_folder(paths: Sequence[str], data_dir: str | Path, output: str | Path, *, bf16: bool = False,
                        scores: str | None = None, force: bool = False, source_lang: str | None = None,
                        target_lang: str | None = None, engines: EngineWriter | None = None,
                        engine_files: Collection[str] = ()) -> Path:
    """Write the model folder of checkpoint(s) ``paths`` (several are averaged) trained on ``data_dir``;
    ``engines`` adds the engine sub-folders (``engine_files``: a file each will hold, checked against the user's
    files in ``output`` before the slow part), given the model with the weights the folder stores."""
    from nmt.checkpoint.format import stored_model_config
    from nmt.checkpoint.model_fit import build_model_from_weights
    from nmt.checkpoint.verify import check_dictionaries
    from nmt.data.data_bin import open_data_dir
    from nmt.model_folder.card import model_card

    output, data_dir = Path(output), Path(data_dir)
    found = read_scores(scores) if scores else None
    data = open_data_dir(str(data_dir), source_lang, target_lang)
    trained_on, sentences = training_data(data_dir, data.src)
    data_dir = data.path  # the first shard of a sharded DATA
    metadata, files = _data_bin_files(data_dir, data.src, data.tgt)
    writes = {WEIGHTS, MANIFEST, CARD, METADATA_FILE, *files, *engine_files}
    check_output(output, force, writes)  # before the slow part; checked again just before the files are put in place
    state = _checkpoint_state(paths)
    check_dictionaries(state, paths[0], {"source": data.src_dict, "target": data.tgt_dict})
    model_cfg = stored_model_config(state)
    model = build_model_from_weights(model_cfg, state["model"], data.src_dict, data.tgt_dict,
                                     source=f"checkpoint {paths[0]}", what="model config",
                                     fix="use the checkpoint as nmt-train wrote it")
    stored, tied = _stored_tensors(model.state_dict(), bf16)
    if bf16 and engines is not None:  # the engines compute with the weights the folder stores
        with torch.no_grad():
            for t in model.state_dict().values():
                if t.is_floating_point():
                    t.copy_(t.to(torch.bfloat16))
    metadata["trained_on"] = trained_on
    config = state.get("config") or {}
    training = state.get("training") or {}
    manifest: dict[str, Any] = {
        "format": FOLDER_FORMAT,
        "format_version": FOLDER_VERSION,
        "nmt_version": state.get("nmt_version"),
        "source_lang": data.src,
        "target_lang": data.tgt,
        "model_config": model_cfg,
        "criterion": config.get("criterion"),
        "plugins": [r for r in state.get("plugins") or [] if r.get("kind") in MODEL_PLUGIN_KINDS],
        "user_dir": state.get("user_dir"),
        # the data-bin's (equal to the checkpoint's when it recorded them): a folder is always checked
        "dictionaries": {"source": data.src_dict.fingerprint(), "target": data.tgt_dict.fingerprint()},
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights": {"file": WEIGHTS, "dtype": "bfloat16" if bf16 else "float32", "tied": tied},
        "exported_from": [str(p) for p in paths],
        "training": {"data": trained_on, "epoch": training.get("epoch"), "num_updates": training.get("num_updates"),
                     "sentences": sentences},
        "scores": found,
        "engines": [],
    }
    from safetensors.torch import save_file

    with folder_in_place(output, force, writes) as tmp:
        save_file(stored, str(tmp / WEIGHTS), metadata={"format": FOLDER_FORMAT})
        manifest["weights"].update(bytes=(tmp / WEIGHTS).stat().st_size, sha256=sha256_of(tmp / WEIGHTS))
        if engines is not None:
            manifest["engines"] = engines(model.eval(), tmp)
        for name in files:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data_dir / name, tmp / name)
        (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (tmp / CARD).write_text(model_card(manifest, metadata), encoding="utf-8")
    return output
