"""The configuration of `nmt-generate` and `nmt-interactive` (fairseq's flag names).

``GenerationConfig`` holds the options every search strategy reads (beam size, length limits,
penalties); a strategy with options of its own (sampling) contributes them through the ``search``
plugin group. ``--beam 1`` with the beam strategy runs the greedy fast path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nmt.config.common import CommonConfig
from nmt.fields import opt, plugin_group

GEN = "generation"
SCORING_HELP = ("Scorers of the translations, comma separated: sacrebleu (detokenized, cased BLEU and chrF2; "
                "always printed first), bleu_lc_tok (BLEU of lowercased, punctuation-normalized, Moses-tokenized "
                "(-a) hypotheses and references: the Multi30k papers' scale), or a scorer plugin.")
TERMS = "terminology"


def constraints_field(reads: str) -> Optional[str]:
    """--constraints [ordered|unordered] of a command that ``reads`` its phrases from where it says."""
    return opt(None, f"Force target phrases into the translations, {reads} (raw target text, tokenized and BPE'd "
                     "like the target; docs/terminology.md): unordered (in any order; the flag alone) or ordered "
                     "(in the order given). Runs --search constrained.",
               choices=["ordered", "unordered"], bare="unordered", group=TERMS)


@dataclass
class GenerationConfig:
    """What the search may produce and how hypotheses are scored."""

    search: dict = plugin_group("search", "beam", "Search strategy.", flag="--search", group=GEN)
    beam: int = opt(5, "Beam size (for sampling: the number of samples drawn per sentence).", low=1, group=GEN)
    nbest: int = opt(1, "Hypotheses to output per sentence (at most --beam).", low=1, group=GEN)
    max_len_a: float = opt(0.0, "Output length limit: a * source length + b (source length counts its eos).",
                           low=0, group=GEN)
    max_len_b: int = opt(200, "Output length limit: a * source length + b.", low=0, group=GEN)
    min_len: int = opt(1, "Minimum output length (tokens before the end of sentence).", low=0, group=GEN)
    # Both bounded so every score stays a finite float32: length^lenpen of any output length a model
    # has positions for, and a penalty beyond 100 nats, which already keeps <unk> out (or in) everywhere.
    lenpen: float = opt(1.0, "Length penalty: hypothesis score = sum of log-probs / length^lenpen "
                             "(< 1 favours short outputs, > 1 long ones).", low=-5, high=5, group=GEN)
    unkpen: float = opt(0.0, "Unknown-word penalty, subtracted from <unk>'s log-probability.", low=-100, high=100,
                        group=GEN)
    no_repeat_ngram_size: int = opt(0, "Never repeat an n-gram of this size in an output (0: off).", low=0,
                                    group=GEN)
    print_alignment: bool = opt(False, "Print A- lines: for each target token the source position it "
                                       "attends most (last decoder layer's cross-attention, averaged over heads).",
                                group=GEN)


@dataclass
class InferenceConfig:
    """The models and how the work is run."""

    path: Optional[str] = opt(None, "Checkpoint(s) or model folder(s) (nmt-export) to translate with; several "
                                    "joined by ':' form an ensemble (their log-probabilities are averaged).",
                              group="inference")
    engine: str = opt("auto", "What runs the model: torch (the model as trained; every checkpoint and option), "
                              "onnxruntime, compiled or ctranslate2 (a model folder's engine files, written by "
                              "nmt-export --with onnx,compiled,ctranslate2), or auto: the first of compiled, "
                              "onnxruntime, ctranslate2 the folder holds that loads here, else torch "
                              "(docs/engines.md).",
                      choices=["auto", "torch", "onnxruntime", "compiled", "ctranslate2"], group="inference")
    trust_compiled: bool = opt(False, "Load a compiled engine package that was not built on this machine by this "
                                      "user (it is native code: loading it runs it).", group="inference")
    bf16: bool = opt(False, "Run the models in bfloat16 (weights cast once; log-probabilities stay fp32). Faster on "
                                "CPUs with bf16 support and on GPUs; hypotheses may differ slightly from fp32.",
                     group="inference")
    quantize: str = opt("none", "Dynamic quantization of the linear layers and output projection for CPU inference: "
                                "int8 (1.4x nmt-generate's speed on the Multi30k peer model; hypotheses differ "
                                "slightly from fp32) or fp16 weights (nearly fp32's hypotheses; faster for a few "
                                "sentences at a time, e.g. a server's).",
                        choices=["none", "int8", "fp16"], group="inference")
    compile: bool = opt(False, "Compile the decoder step with torch.compile (inductor, C++): searches about 1.6-1.8x "
                               "as fast with --bf16 on the CPU, after a start-up of one to a few minutes (more for "
                               "each new kind of step); pays for long jobs and servers, not for a few sentences.",
                        group="inference")
    threads: Optional[int] = opt(None, "torch intra-op threads [default: torch's choice].", low=1, group="inference")
    max_tokens: Optional[int] = opt(None, "Maximum source tokens (padding included) in a batch.", low=1,
                                    group="inference")
    batch_size: Optional[int] = opt(None, "Maximum sentences in a batch [default: 128 when --max-tokens is unset].",
                                    low=1, group="inference")
    quiet: bool = opt(False, "Print only the summary (speed, BLEU), not the hypotheses.", group="inference")


@dataclass
class TranslateJob:
    """What nmt-generate and nmt-interactive share: the models' search, the batching, the data-bin."""

    common: CommonConfig = field(default_factory=CommonConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    data: Optional[str] = opt(None, "The data-bin folder written by nmt-preprocess (its dictionaries, "
                                    "tokenizer and BPE are used).", cli=False)
    source_lang: Optional[str] = opt(None, "Source language [default: read from the data-bin].")
    target_lang: Optional[str] = opt(None, "Target language [default: read from the data-bin].")
    glossary: Optional[str] = opt(None, "Glossary file: one 'source term<TAB>target term' per line ('#' comments); "
                                        "where a source term occurs in a sentence (whole words, any case), its "
                                        "target term is forced into the translation (docs/terminology.md).",
                                  group=TERMS)


@dataclass
class GenerateJob(TranslateJob):
    """`nmt-generate DATA --path CKPT`: translate a binarized split and score it."""

    gen_subset: str = opt("test", "Split to translate (train, valid, test, ...).")
    results_path: Optional[str] = opt(None, "Write the output to DIR/generate-SUBSET.txt instead of stdout.")
    reference: Optional[str] = opt(None, "Raw (untokenized) reference text for BLEU [default: DATA/raw/SPLIT.TGT "
                                         "kept by nmt-preprocess, else the target side decoded].")
    scoring: str = opt("sacrebleu", SCORING_HELP)
    attention_plot: Optional[str] = opt(None, "Save cross-attention heatmaps (PNG, one per head) of the first "
                                              "--attention-plot-sentences sentences in this folder "
                                              "(needs matplotlib).")
    attention_plot_sentences: int = opt(3, "How many sentences --attention-plot draws.", low=1)
    attention_layer: int = opt(-1, "Decoder layer whose cross-attention --attention-plot draws (-1: the last).")
    skip_invalid_size_inputs_valid_test: bool = opt(False, "Skip sentences longer than the model's positions or "
                                                           "bigger than --max-tokens (counted in a warning) instead "
                                                           "of failing.")
    workers: int = opt(1, "Processes that translate the split together, each with its own copy of the models, "
                          "every N-th sentence in length order and its share of the cores (--threads is per "
                          "process) [faster on a CPU: docs/generation.md].", low=1, high=64)
    constraints: Optional[str] = constraints_field("read from --constraints-file")
    constraints_file: Optional[str] = opt(None, "The phrases --constraints forces: one line per sentence of the "
                                                "split, its phrases separated by tabs (an empty line: none).",
                                          group=TERMS)


@dataclass
class InteractiveJob(TranslateJob):
    """`nmt-interactive DATA --path CKPT`: translate raw sentences from stdin or --input."""

    input: str = opt("-", "File of raw sentences, one per line ('-': stdin).")
    buffer_size: int = opt(64, "Sentences read before a batch is translated.", low=1)
    verbose: bool = opt(False, "Print fairseq's S-/H-/D-/P- lines instead of only the translations.")
    constraints: Optional[str] = constraints_field("given after each sentence as fairseq-interactive reads them: "
                                                   "source<TAB>phrase<TAB>phrase")


@dataclass
class AverageJob:
    """`nmt-average-checkpoints`: the element-wise mean of several checkpoints' parameters."""

    common: CommonConfig = field(default_factory=CommonConfig)
    inputs: Optional[str] = opt(None, "Checkpoint files joined by ':' (or ','), or one folder with "
                                      "--num-epoch-checkpoints / --num-update-checkpoints / "
                                      "--num-progress-checkpoints.")
    output: Optional[str] = opt(None, "The averaged checkpoint to write.")
    num_epoch_checkpoints: Optional[int] = opt(None, "Average the last N checkpointEPOCH.pt files of the folder.",
                                               low=1)
    num_update_checkpoints: Optional[int] = opt(None, "Average the last N checkpoint_EPOCH_UPDATE.pt files of the "
                                                      "folder.", low=1)
    num_progress_checkpoints: Optional[int] = opt(None, "Average the last N checkpoint_progress_P.pt files of the "
                                                        "folder (nmt-train --save-at-progress).", low=1)
