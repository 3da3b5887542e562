"""Translate raw text from Python.

    import nmt
    model = nmt.load("models/m30k_en_de")                  # a model folder written by nmt-export
    model = nmt.load("checkpoint_best.pt", data="data-bin/multi30k_en_de")   # or checkpoint + data-bin
    model.translate(["A man is riding a bike ."], beam=5)  # -> ["Ein Mann fährt Fahrrad ."]
    model.translate_detailed(["..."], nbest=2, alignment=True, attention=True)

Sentences go through the data-bin's tokenizer and BPE, are batched by length and searched with the
streaming search nmt-generate uses, and come back detokenized in input order. Search options are
nmt-generate's (``beam``, ``nbest``, ``lenpen``, ``max_len_a``, ``max_len_b``, ``min_len``, ``unkpen``,
``no_repeat_ngram_size``, ``search``), checked as the command line checks them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from nmt.config.generate import GenerationConfig, InferenceConfig
from nmt.errors import UsageError
from nmt.generation.inference import DataDir, EnsembleModel, Translator

# the search options translate() takes: nmt-generate's (print_alignment is accepted for a GenerationConfig's
# fields given whole, as nmt-serve does, but it is alignment=True that asks for alignments)
SEARCH_OPTIONS = frozenset(f.name for f in fields(GenerationConfig))


@dataclass
class TranslatedHypothesis:
    """One output for one sentence."""

    text: str  # detokenized
    tokens: list[str]  # the model's target tokens (subwords), </s> left out
    score: float  # the search's score: sum of natural-log probabilities / length**lenpen
    positional_scores: list[float]  # natural-log probability of each token, </s> included
    alignment: list[tuple[int, int]] | None = None  # (source token, target token) pairs, when asked for


@dataclass
class Translation:
    """A source sentence and its hypotheses, best first."""

    source: str
    source_tokens: list[str]  # the model's source tokens (subwords), </s> left out
    hypotheses: list[TranslatedHypothesis]
    # encoder-decoder attention of the best hypothesis, when asked for: (layers, heads, target tokens + </s>,
    # source tokens + </s>), recomputed with one teacher-forced pass of the first model
    attention: torch.Tensor | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return self.hypotheses[0].text if self.hypotheses else ""


class TranslationModel:
    """A loaded model (or ensemble) with its dictionaries and text pipeline. Calls may come from several
    threads: searches run one at a time."""

    def __init__(self, ens: EnsembleModel, data: DataDir, path: str, *, seed: int = 1,
                 info: dict[str, Any] | None = None):
        from nmt.data.text_pipeline import load_text_pipeline

        self.ens = ens
        self.data = data
        self.path = path
        self.seed = seed
        self.info = info or {}
        self._encode = load_text_pipeline(data.path, data.src).encode
        self._decode = load_text_pipeline(data.path, data.tgt).decode
        self._translators: dict[str, Translator] = {}
        self._configs: dict[tuple, GenerationConfig] = {}  # checked options -> config (checking takes ~5 ms)
        self.lock = threading.Lock()  # one search at a time: the models' caches are not shared

    @property
    def source_lang(self) -> str:
        return self.data.src

    @property
    def target_lang(self) -> str:
        return self.data.tgt

    @property
    def max_source_positions(self) -> int:
        """The longest source (model tokens, </s> included) the model takes."""
        return self.ens.max_source_positions()

    @property
    def parameters(self) -> int:
        return sum(p.numel() for m in self.ens.models for p in m.parameters())

    def tokenize(self, sentence: str) -> list[str]:
        """The model's source tokens of a raw sentence (tokenizer then BPE), </s> left out."""
        return self._encode(sentence).split()

    def encode(self, sentence: str) -> torch.Tensor:
        """The source ids of a raw sentence, </s> included."""
        return self.data.src_dict.encode_line(self._encode(sentence))

    def generation_config(self, **options: Any) -> GenerationConfig:
        """nmt-generate's GenerationConfig from keyword options, checked (a bad value is a ConfigError) once per
        distinct set of options: the check builds an omegaconf schema, ~5 ms, a tenth of a short sentence's
        translation."""
        from nmt.config.fields import to_dataclass

        try:
            key = _frozen(options)
            cached = self._configs.get(key)
        except TypeError:  # a value that cannot be a key: checked every time
            key, cached = None, None
        if cached is not None:
            return cached
        unknown = sorted(set(options) - SEARCH_OPTIONS)
        if unknown:
            raise UsageError(f"translate(): unknown option(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(SEARCH_OPTIONS - {'print_alignment'}))}, alignment, attention, "
                             "max_tokens, batch_size")
        search = options.get("search")
        if isinstance(search, str):
            options["search"] = {"name": search}
        gen = to_dataclass(GenerationConfig, options, where="translate().")
        if key is not None:
            self._configs[key] = gen
        return gen

    def translator(self, gen: GenerationConfig) -> Translator:
        """The search ``gen`` configures for this model (kept per distinct configuration)."""
        from nmt.generation.inference import search_for

        key = repr(gen)
        if key not in self._translators:  # building the search checks its options (SEARCH.build)
            self._translators[key] = Translator(self.ens, search_for(gen, self.ens, self.data, self.seed))
        return self._translators[key]

    def translate(self, sentences: str | Sequence[str], **options: Any) -> Any:
        """Detokenized best translations: a list for a list of sentences, a string for one string."""
        if isinstance(sentences, str):
            return self.translate_detailed([sentences], **options)[0].text
        return [t.text for t in self.translate_detailed(sentences, **options)]

    def translate_detailed(self, sentences: Sequence[str], *, alignment: bool = False, attention: bool = False,
                           max_tokens: int = 8192, batch_size: int = 128, **options: Any) -> list[Translation]:
        """Per sentence, ``nbest`` hypotheses with scores, tokens, (``alignment``) alignments and
        (``attention``) the encoder-decoder attention of every layer and head of the best one."""
        if isinstance(sentences, str):
            raise UsageError("translate_detailed() takes a list of sentences; wrap one sentence in a list")
        sentences = list(sentences)  # a generator is read once
        wrong = next((k for k, s in enumerate(sentences) if not isinstance(s, str)), None)
        if wrong is not None:
            raise UsageError(f"translate(): sentence {wrong} is a {type(sentences[wrong]).__name__}, not a string; "
                             "give raw text (str)")
        gen = self.generation_config(**options)
        ids = [self.encode(s) for s in sentences]
        return self.translate_ids(sentences, ids, gen, alignment=alignment or gen.print_alignment,
                                  attention=attention, max_tokens=max_tokens, batch_size=batch_size)

    def translate_ids(self, sentences: Sequence[str], ids: Sequence[torch.Tensor], gen: GenerationConfig, *,
                      alignment: bool = False, attention: bool = False, max_tokens: int = 8192,
                      batch_size: int = 128) -> list[Translation]:
        """``translate_detailed`` for sources already encoded (``encode``): what a server batching the
        sentences of several requests calls."""
        with self.lock:
            translator = self.translator(gen)
            translator.check_source_lengths([len(i) for i in ids], lambda k: f"sentence {k}")  # k: 0-based
            found = dict(translator.translate_stream(self._batches(ids, max_tokens, batch_size),
                                                     need_attn=alignment))
            return [self.translation(sentences[k], ids[k], found[k], alignment=alignment, attention=attention)
                    for k in range(len(ids))]

    def _batches(self, ids: Sequence[torch.Tensor], max_tokens: int, batch_size: int
                 ) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
        from nmt.data.batching import batch_by_size
        from nmt.generation.inference import pad_batch

        plan = batch_by_size(np.array([len(i) for i in ids], dtype=np.int64), None, max_tokens=max_tokens,
                             max_sentences=batch_size, seed=None, split="input")
        for indices in plan.batches:
            rows = [int(i) for i in indices]
            src_tokens, src_lengths = pad_batch([ids[i] for i in rows], self.data.src_dict.pad())
            yield rows, src_tokens, src_lengths

    def _attention(self, src: torch.Tensor, hyp: Any) -> torch.Tensor:
        """(layers, heads, T, S) encoder-decoder attention of ``hyp`` in the first model."""
        from nmt.generation.inference import decoder_start, teacher_forced_attention

        start = decoder_start(self.ens, self.data.tgt_dict)
        first = self.data.tgt_dict.bos() if start is None else start
        return teacher_forced_attention(self.ens.models[0], src, hyp.tokens, first)

    def translation(self, sentence: str, src: torch.Tensor, hyps: list[Any], *, alignment: bool = False,
                    attention: bool = False) -> Translation:
        """The Translation of ``sentence`` (source ids ``src``) from the search's hypotheses; ``attention``
        recomputes the best one's encoder-decoder attention (call it holding ``lock``)."""
        from nmt.generation.inference import hard_alignment

        weights = self._attention(src, hyps[0]) if attention and hyps else None
        src_dict, tgt_dict = self.data.src_dict, self.data.tgt_dict
        out = []
        for hyp in hyps:
            text = tgt_dict.string(hyp.tokens)
            pairs = hard_alignment(hyp.attention, len(src)) if alignment and hyp.attention is not None else None
            out.append(TranslatedHypothesis(text=self._decode(text), tokens=text.split(), score=float(hyp.score),
                                            positional_scores=[float(x) for x in hyp.positional_scores.tolist()],
                                            alignment=pairs))
        return Translation(sentence, [src_dict[int(i)] for i in src[:-1]], out, weights)


def _frozen(value: Any) -> Any:
    """``value`` as a dictionary key: mappings and sequences (e.g. a search plugin's options) become tuples."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def load(path: str | Path, data: str | Path | None = None, *, bf16: bool = False, quantize: str = "none",
         compile: bool = False, threads: int | None = None, user_dir: str | Path | None = None,
         seed: int = 1) -> TranslationModel:
    """A model ready to translate raw text: a model folder (nmt-export), or checkpoint(s) (':'-joined: an
    ensemble) with ``data``, the data-bin they were trained on. ``bf16`` runs the weights in bfloat16,
    ``quantize="int8"`` (or ``"fp16"``) the linear layers with int8 (fp16) weights on the CPU; ``compile``
    compiles the decoder step (nmt-generate's --compile: the first translations of each kind of search
    compile it, later ones run faster); ``user_dir`` imports a folder of plugins the model needs."""
    from nmt.config.fields import to_dataclass
    from nmt.generation.inference import load_inference_models, model_and_data, open_data_dir
    from nmt.model_folder.layout import is_model_folder, read_manifest
    from nmt.plugin_loader import load_plugins

    load_plugins(user_dir)
    missing = [p for p in str(path).split(":") if p and not Path(p).exists()]
    if missing:
        raise UsageError(f"nmt.load({str(path)!r}): {missing[0]}: no such checkpoint or model folder")
    data_dir, paths = model_and_data(str(data) if data else None, str(path))
    if not data_dir:
        raise UsageError(f"nmt.load({str(path)!r}): a checkpoint needs data=<the data-bin it was trained on> "
                         "(or export a model folder with nmt-export)")
    folder = open_data_dir(data_dir, None, None)
    inference = to_dataclass(InferenceConfig, {"path": paths, "bf16": bf16, "quantize": quantize, "compile": compile,
                                               "threads": threads},
                             where="nmt.load().")  # checked: a bad value is one ConfigError line
    ens = load_inference_models(inference, folder)
    info = read_manifest(paths) if paths and is_model_folder(paths) else {}
    return TranslationModel(ens, folder, str(paths), seed=seed, info=info)
