"""The configuration of `nmt-export`: a trained model as a self-contained folder (nmt's own, or CTranslate2's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nmt.config.common import CommonConfig
from nmt.fields import opt


@dataclass
class ExportJob:
    """`nmt-export DATA --path CKPT --output MODEL_DIR`: checkpoint(s) + data-bin -> one model folder."""

    common: CommonConfig = field(default_factory=CommonConfig)
    data: Optional[str] = opt(None, "The data-bin the model was trained on (its dictionaries, tokenizer and BPE "
                                    "codes go into the folder); not needed when --path is a model folder.", cli=False)
    path: Optional[str] = opt(None, "Checkpoint(s) to export; several joined by ':' are averaged first "
                                    "(--format ctranslate2 also takes a model folder).")
    output: Optional[str] = opt(None, "The model folder to write (it must not exist, or be empty, unless --force).")
    format: str = opt("nmt", "nmt: safetensors weights + config + dictionaries + text pipeline + model card, read "
                             "by nmt.load, nmt-serve, nmt-generate/-interactive/-validate --path; ctranslate2: a "
                             "folder ctranslate2.Translator loads (needs pip install 'nmt[ctranslate2]').",
                      choices=["nmt", "ctranslate2"])
    engines: Optional[str] = opt(None, "Engine files to add to the model folder, comma-separated: onnx (onnxruntime), "
                                       "compiled (ahead-of-time compiled for this CPU and torch version), "
                                       "ctranslate2; each in a sub-folder the model card lists. With --path a "
                                       "model folder (and no --output, or the same folder), they are added to it "
                                       "(--force: exported again). docs/engines.md.", flag="--with")
    compiled_precision: str = opt("auto", "--with compiled: the packages' precision: float32; both (float32 and "
                                          "bfloat16, for --engine compiled --bf16); auto: both where this CPU has "
                                          "bf16 matrix instructions, else float32.",
                                  choices=["auto", "float32", "both"])
    onnx_precision: str = opt("both", "--with onnx: the graphs' precision: float32; both (float32 and int8 weights, "
                                      "for --engine onnxruntime --quantize int8: the fastest engine for a lone "
                                      "sentence where bf16 is slow; docs/engines.md).",
                              choices=["float32", "both"])
    bf16: bool = opt(False, "Store the weights in bfloat16 (half the size; loaded back as float32).")
    quantization: Optional[str] = opt(None, "--format ctranslate2: the weights' type in the CTranslate2 model "
                                            "[default: float32].",
                                      choices=["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                                               "float16", "bfloat16", "float32"])
    scores: Optional[str] = opt(None, "An nmt-generate output (stdout, or generate-test.txt from --results-path): "
                                      "its BLEU and sacreBLEU signature go into the model card.")
    force: bool = opt(False, "Replace the files an earlier nmt-export wrote in --output (a model folder), once the "
                             "new ones are complete; the folder's other files are kept (--format nmt only).")
    source_lang: Optional[str] = opt(None, "Source language [default: read from the data-bin].")
    target_lang: Optional[str] = opt(None, "Target language [default: read from the data-bin].")
