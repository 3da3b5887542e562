"""The model card (README.md) of a model folder: what the model translates, how big it is, what it was
trained on, how well it scored, and how to use it."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

from nmt.bounded_read import read_head
from nmt.errors import DataError
from nmt.model_folder.layout import CARD

MAX_CARD_BYTES = 256 << 10  # nmt-export writes about 1 KB; a card edited by hand stays far below this
CUT_NOTE = "\n\n(model card cut at {:,} bytes: the rest of README.md is not shown)\n"


def read_card(folder: str | Path) -> str | None:
    """The model card (README.md) of a model folder, at most its first MAX_CARD_BYTES (a longer one is cut,
    with a line saying so); None when it is missing or not a regular file."""
    try:
        raw, cut = read_head(Path(folder) / CARD, MAX_CARD_BYTES, DataError, "")
    except DataError:
        return None
    # a character the cut splits in two is left out (final=False keeps an incomplete sequence back)
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(raw, final=not cut)
    return text + CUT_NOTE.format(MAX_CARD_BYTES) if cut else text


def _parameters(count: int) -> str:
    return f"{count / 1e6:.1f}M ({count:,})" if count >= 1e6 else f"{count:,}"


def model_card(manifest: dict[str, Any], metadata: dict[str, Any]) -> str:
    """README.md text for a model folder from its manifest and its (split-less) metadata.json."""
    src, tgt = manifest["source_lang"], manifest["target_lang"]
    cfg = manifest["model_config"]
    arch = cfg.get("arch")
    arch_name = arch.get("name") if isinstance(arch, dict) else arch
    training = manifest.get("training") or {}
    pipeline = metadata.get("pipeline") or {}
    key_dim = cfg.get("attention_key_dim")  # absent from models exported before the option, None by default
    lines = [
        f"# {src} -> {tgt} translation model (nmt)",
        "",
        f"- **Languages**: {src} -> {tgt}",
        f"- **Architecture**: {arch_name}, {cfg.get('encoder_layers')}+{cfg.get('decoder_layers')} layers, "
        f"d_model {cfg.get('encoder_embed_dim')}, FFN {cfg.get('encoder_ffn_embed_dim')}, "
        f"{cfg.get('encoder_attention_heads')} heads" + (f", attention key size d_k {key_dim}" if key_dim else ""),
        f"- **Parameters**: {_parameters(int(manifest['parameters']))}",
        f"- **Weights**: {manifest['weights']['file']} ({manifest['weights']['dtype']}, sha256 "
        f"{manifest['weights']['sha256'][:16]}...)",
        f"- **Text pipeline**: tokenizer {pipeline.get('tokenizer', {}).get('name')}, subwords "
        f"{pipeline.get('bpe', {}).get('name')}",
    ]
    data = f"- **Training data**: data-bin {training.get('data')}"
    if training.get("sentences"):
        data += f", {int(training['sentences']):,} sentence pairs"
    if training.get("num_updates") is not None:
        data += f"; {training['num_updates']} updates, epoch {training.get('epoch')}"
    lines.append(data)
    if len(manifest.get("exported_from") or []) > 1:
        lines.append(f"- **Checkpoints averaged**: {len(manifest['exported_from'])}")
    scores = manifest.get("scores")
    if scores:
        lines.append(f"- **{scores.get('split')} BLEU** (beam {scores.get('beam')}, detokenized sacreBLEU): "
                     f"{scores['bleu']}")
        if scores.get("signature"):
            lines.append(f"- **sacreBLEU signature**: `{scores['signature']}`")
        if scores.get("reference"):
            lines.append(f"- **Scored against**: {scores['reference']}")
    else:
        lines.append("- **Test BLEU**: not given (pass nmt-generate's output to nmt-export --scores)")
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "import nmt",
        "model = nmt.load(\"THIS_FOLDER\")",
        "print(model.translate([\"A sentence to translate.\"], beam=5))",
        "```",
        "",
        "```bash",
        "nmt-interactive THIS_FOLDER          # raw sentences on stdin",
        "nmt-serve THIS_FOLDER --port 5000    # HTTP server and a page at http://127.0.0.1:5000/",
        "```",
        "",
        "The weights are safetensors; loading this folder never unpickles anything.",
        "",
    ]
    return "\n".join(lines + _engine_lines(manifest.get("engines") or []))


# what each engine export holds and needs, for the card (nmt.engines names them; docs/engines.md says more)
_ENGINE_TEXT = {
    "onnxruntime": "the encoder and one decoder step in ONNX, run by onnxruntime (pip install 'nmt[onnx]'), in "
                   "fp32 and, when exported with them (*.int8.onnx), with int8 weights (--quantize int8); loading "
                   "runs no code from the folder",
    "compiled": "the encoder and decoder step compiled ahead of time (torch.export + AOTInductor) for the CPU and "
                "torch version that built them. **A compiled package is native code: loading it runs it.** nmt "
                "loads it only on the machine and for the user that built it (a record kept outside this folder), "
                "or with --trust-compiled; a copied-in package is refused",
    "ctranslate2": "a CTranslate2 model (pip install 'nmt[ctranslate2]'), run by CTranslate2's own search with "
                   "nmt's search options",
}


def _engine_lines(records: list[dict[str, Any]]) -> list[str]:
    """The card's "Engines" section: each engine export the folder holds (none: the torch engine alone)."""
    if not records:
        return []
    lines = ["## Engines", "",
             "Besides the torch engine (the weights above), this folder holds (`--engine NAME` on nmt-generate, "
             "nmt-interactive and nmt-serve, `nmt.load(FOLDER, engine=NAME)`; `auto`, the default, takes the "
             "fastest that loads):", ""]
    for record in records:
        engine = record.get("engine")
        size = sum(int(f.get("bytes", 0)) for f in (record.get("files") or {}).values())
        lines.append(f"- **{engine}** (`{record.get('name')}/`, {size / 1e6:.1f} MB): "
                     f"{_ENGINE_TEXT.get(str(engine), 'an engine of a later nmt')}")
    return lines + [""]
