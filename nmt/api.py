"""Translate raw text from Python.

    import nmt
    model = nmt.load("models/m30k_en_de")                  # a model folder written by nmt-export
    model = nmt.load("checkpoint_best.pt", data="data-bin/multi30k_en_de")   # or checkpoint + data-bin
    model.translate(["A man is riding a bike ."], beam=5)  # -> ["Ein Mann fährt Fahrrad ."]
    model.translate_detailed(["..."], nbest=2, alignment=True, attention=True)
    model.translate(["A man in a hat ."], constraints=[["Mütze"]])   # -> ["Ein Mann mit Mütze ."]
    nmt.load("models/m30k_en_de", glossary="terms.tsv")    # glossary terms forced where their source terms occur

Sentences go through the data-bin's tokenizer and BPE, are batched by length and searched with the
streaming search nmt-generate uses, and come back detokenized in input order; an empty or whitespace-only
sentence (nothing left after tokenization) translates to "" without a search. Search options are
nmt-generate's (``beam``, ``nbest``, ``lenpen``, ``max_len_a``, ``max_len_b``, ``min_len``, ``unkpen``,
``no_repeat_ngram_size``, ``search``), of their declared types (no conversion: ``beam="5"`` or ``beam=True`` is
refused) and checked as the command line checks them (nmt.generation.search_options). ``constraints`` (one list
of raw target phrases per sentence), ``ordered`` and ``glossary`` force terms into the translations with the
constrained search (docs/terminology.md); each hypothesis names the phrases it lacks (``unmet_constraints``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch

from nmt.config.generate import GenerationConfig, InferenceConfig
from nmt.data.data_bin import DataDir
from nmt.engines.selection import LoadedEngine
from nmt.engines.translator import TranslatorLike
from nmt.errors import ConfigError, UsageError
from nmt.generation.constraint_input import Terms
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search_options import generation_config, type_problem
from nmt.lru import LruCache

# the search options translate() takes: nmt-generate's (print_alignment is accepted for a GenerationConfig's
# fields given whole, as nmt-serve does, but it is alignment=True that asks for alignments)
SEARCH_OPTIONS = frozenset(f.name for f in fields(GenerationConfig))
# distinct search options whose checked config and search are kept: a server's clients may send a new set with
# every request, and the memory they take must stay bounded
KEPT_SEARCHES = 64


@dataclass
class TranslatedHypothesis:
    """One output for one sentence."""

    text: str  # detokenized
    tokens: list[str]  # the model's target tokens (subwords), </s> left out
    score: float  # the search's score: sum of natural-log probabilities / length**lenpen
    positional_scores: list[float]  # natural-log probability of each token, </s> included
    alignment: list[tuple[int, int]] | None = None  # (source token, target token) pairs, when asked for
    unmet_constraints: list[str] = field(default_factory=list)  # the sentence's forced phrases it does not contain


@dataclass
class Translation:
    """A source sentence and its hypotheses, best first."""

    source: str
    source_tokens: list[str]  # the model's source tokens (subwords), </s> left out
    hypotheses: list[TranslatedHypothesis]
    # encoder-decoder attention of the best hypothesis, when asked for: (layers, heads, target tokens + </s>,
    # source tokens + </s>), recomputed with one teacher-forced pass of the first model
    attention: torch.Tensor | None = field(default=None, repr=False)
    constraints: list[str] = field(default_factory=list)  # the phrases forced: given ones, then the glossary's

    @property
    def text(self) -> str:
        return self.hypotheses[0].text if self.hypotheses else ""

    @property
    def unmet_constraints(self) -> list[str]:
        """The forced phrases the best hypothesis does not contain."""
        return self.hypotheses[0].unmet_constraints if self.hypotheses else list(self.constraints)


class TranslationModel:
    """A loaded model (or ensemble) with its dictionaries and text pipeline. Calls may come from several
    threads: searches run one at a time."""

    def __init__(self, engine: LoadedEngine, data: DataDir, path: str, *, seed: int = 1,
                 info: dict[str, Any] | None = None, glossary: str | Path | Mapping[str, str] | None = None):
        from nmt.data.text_pipeline import load_text_pipeline
        from nmt.generation.terminology import Terminology

        self.engine = engine  # what searches: torch, onnxruntime, compiled or ctranslate2 (nmt.engines)
        self.ens: EnsembleModel | None = engine.ens  # the torch models, or the engine's steps (None: ctranslate2)
        self.data = data
        self.path = path
        self.seed = seed
        self.info = info or {}
        source, target = load_text_pipeline(data.path, data.src), load_text_pipeline(data.path, data.tgt)
        self._encode = source.encode
        self._decode = target.decode
        # forced phrases and the glossary (checked now: a bad entry fails nmt.load)
        self.terminology = Terminology.of(data, glossary, source=source, target=target)
        self._translators: LruCache[TranslatorLike] = LruCache(KEPT_SEARCHES)
        self._configs: LruCache[GenerationConfig] = LruCache(KEPT_SEARCHES)  # checked options -> config (~5 ms)
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
        return self.engine.max_source_positions()

    @property
    def parameters(self) -> int:
        return self.engine.parameters

    def tokenize(self, sentence: str) -> list[str]:
        """The model's source tokens of a raw sentence (tokenizer then BPE), </s> left out."""
        return self._encode(sentence).split()

    def encode(self, sentence: str) -> torch.Tensor:
        """The source ids of a raw sentence, </s> included."""
        return self.data.src_dict.encode_line(self._encode(sentence))

    def generation_config(self, **options: Any) -> GenerationConfig:
        """nmt-generate's GenerationConfig from keyword options, checked (a bad value is a ConfigError) once per
        distinct set of options (values and their types): the check builds an omegaconf schema, ~5 ms, a tenth of
        a short sentence's translation."""
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
        gen = generation_config(options, "translate()")
        if key is not None:
            self._configs.put(key, gen)
        return gen

    def translator(self, gen: GenerationConfig) -> TranslatorLike:
        """The search ``gen`` configures for this model (the last KEPT_SEARCHES configurations' are kept)."""
        key = repr(gen)
        translator = self._translators.get(key)
        if translator is None:  # building the search checks its options (SEARCH.build)
            translator = self.engine.translator(gen, self.seed)
            self._translators.put(key, translator)
        return translator

    def translate(self, sentences: str | Sequence[str], **options: Any) -> Any:
        """Detokenized best translations: a list for a list of sentences, a string for one string (whose
        ``constraints`` are then one list of phrases)."""
        if isinstance(sentences, str):
            if options.get("constraints") is not None:
                options["constraints"] = [options["constraints"]]
            return self.translate_detailed([sentences], **options)[0].text
        _check_sentence_list(sentences, "translate()")
        return [t.text for t in self.translate_detailed(sentences, **options)]

    def translate_detailed(self, sentences: Sequence[str], *, alignment: bool = False, attention: bool = False,
                           max_tokens: int = 8192, batch_size: int = 128,
                           constraints: Optional[Sequence[Sequence[str]]] = None, ordered: bool = False,
                           glossary: str | Path | Mapping[str, str] | None = None, **options: Any
                           ) -> list[Translation]:
        """Per sentence, ``nbest`` hypotheses with scores, tokens, (``alignment``) alignments and
        (``attention``) the encoder-decoder attention of every layer and head of the best one. ``constraints``:
        per sentence a list of raw target phrases its translation must contain (``ordered``: in that order);
        ``glossary`` (a file or ``{source term: target term}``) adds to the model's glossary for this call."""
        if isinstance(sentences, str):
            raise UsageError("translate_detailed() takes a list of sentences; wrap one sentence in a list")
        _check_sentence_list(sentences, "translate_detailed()")
        sentences = list(sentences)  # a generator is read once
        for k, sentence in enumerate(sentences):
            problem = text_problem(sentence)
            if problem:
                raise UsageError(f"translate(): sentence {k} {problem}")
        for name, value, kind in (("alignment", alignment, bool), ("attention", attention, bool),
                                  ("max_tokens", max_tokens, int), ("batch_size", batch_size, int),
                                  ("ordered", ordered, bool)):
            why = type_problem(value, kind)
            if why:
                raise ConfigError(f"translate(): {name} {value!r}: {why}")
        gen = self.generation_config(**options)
        ids = [self.encode(s) for s in sentences]
        named = f"translate(search={options['search']!r})" if "search" in options else None
        gen, terms = self.sentence_terms(sentences, ids, gen, constraints, ordered=ordered, glossary=glossary,
                                         named=named)
        return self.translate_ids(sentences, ids, gen, alignment=alignment or gen.print_alignment,
                                  attention=attention, max_tokens=max_tokens, batch_size=batch_size, terms=terms)

    def sentence_terms(self, sentences: Sequence[str], ids: Sequence[torch.Tensor], gen: GenerationConfig,
                       constraints: object, *, ordered: bool = False,
                       glossary: str | Path | Mapping[str, str] | None = None, named: Optional[str] = None,
                       field: str = "translate(): constraints",
                       item: Callable[[int], str] = lambda k: f"translate(): constraints of sentence {k}"
                       ) -> tuple[GenerationConfig, list[Optional[Terms]]]:
        """The search for ``sentences`` (sources ``ids``) and the phrases each must contain: its ``constraints``
        (a list of raw target phrases per sentence, or None) and the glossary's terms (the model's, with
        ``glossary`` added); ``gen`` becomes the constrained search when any sentence has some (``named``: how the
        caller chose another search, refused). What cannot be forced is a UsageError naming ``field`` (the whole
        list) or ``item(k)`` (sentence k's)."""
        from nmt.generation.constraint_input import with_constrained_search

        given: list[Sequence[str]] = [[] for _ in sentences]
        if constraints is not None:
            if isinstance(constraints, (str, bytes)) or not isinstance(constraints, Sequence):
                raise UsageError(f"{field}: a {type(constraints).__name__}; give one list of target phrases per "
                                 "sentence ([] for none)")
            if len(constraints) != len(sentences):
                raise UsageError(f"{field}: {len(constraints)} lists for {len(sentences)} sentences; give one list "
                                 "of target phrases per sentence ([] for none)")
            given = list(constraints)
        used = self.terminology.read(glossary)
        matching = used is not None or self.terminology.glossary is not None
        if constraints is None and not matching:
            return gen, [None] * len(sentences)
        words = self.terminology.words
        terms = [self.terminology.terms(words(s) if matching else [], phrases, item(k), ordered=ordered, glossary=used)
                 for k, (s, phrases) in enumerate(zip(sentences, given))]
        if all(t is None for t in terms):
            return gen, terms
        gen = with_constrained_search(gen, named)
        positions = self.engine.max_target_positions()
        for k in searched_rows(ids):  # an empty sentence is not searched: its phrases are reported unmet
            self.terminology.check(terms[k], gen, positions, len(ids[k]), item(k))
        return gen, terms

    def translate_ids(self, sentences: Sequence[str], ids: Sequence[torch.Tensor], gen: GenerationConfig, *,
                      alignment: bool = False, attention: bool = False, max_tokens: int = 8192,
                      batch_size: int = 128, terms: Optional[Sequence[Optional[Terms]]] = None) -> list[Translation]:
        """``translate_detailed`` for sources already encoded (``encode``), with each one's forced phrases
        (``sentence_terms``)."""
        from nmt.generation.constraint_input import constraint_map

        rows = searched_rows(ids)
        kept = [terms[k] if terms else None for k in range(len(ids))]
        constraints = constraint_map([kept[k] for k in rows]) if any(kept) else None
        with self.lock:
            translator = self.translator(gen)
            translator.check_source_lengths([len(i) for i in ids], lambda k: f"sentence {k}")  # k: 0-based
            batches = self._batches([ids[k] for k in rows], max_tokens, batch_size)
            found = {rows[j]: hyps for j, hyps in translator.translate_stream(batches, need_attn=alignment,
                                                                               constraints=constraints)}
            return [self.translation(sentences[k], ids[k], found[k], alignment=alignment, attention=attention,
                                     terms=kept[k])
                    if k in found else blank_translation(sentences[k], alignment=alignment, terms=kept[k])
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
        from nmt.generation.alignment import teacher_forced_attention

        model, first = self.engine.attention_model()
        return teacher_forced_attention(model, src, hyp.tokens, first)

    def translation(self, sentence: str, src: torch.Tensor, hyps: list[Any], *, alignment: bool = False,
                    attention: bool = False, terms: Optional[Terms] = None) -> Translation:
        """The Translation of ``sentence`` (source ids ``src``) from the search's hypotheses; ``attention``
        recomputes the best one's encoder-decoder attention (call it holding ``lock``); ``terms``: the phrases
        it had to contain."""
        from nmt.generation.alignment import hard_alignment
        from nmt.generation.constraint_input import unmet_phrases

        weights = self._attention(src, hyps[0]) if attention and hyps else None
        src_dict, tgt_dict = self.data.src_dict, self.data.tgt_dict
        out = []
        for hyp in hyps:
            text = tgt_dict.string(hyp.tokens)
            pairs = hard_alignment(hyp.attention, len(src)) if alignment and hyp.attention is not None else None
            out.append(TranslatedHypothesis(text=self._decode(text), tokens=text.split(), score=float(hyp.score),
                                            positional_scores=[float(x) for x in hyp.positional_scores.tolist()],
                                            alignment=pairs, unmet_constraints=unmet_phrases(terms, hyp.tokens)))
        return Translation(sentence, [src_dict[int(i)] for i in src[:-1]], out, weights,
                           list(terms.texts) if terms else [])


def _frozen(value: Any) -> Any:
    """``value`` as a dictionary key: mappings and sequences (e.g. a search plugin's options) become tuples, and
    each other value goes with its type (True, 1 and 1.0 are equal keys, but only 1 is a beam)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return type(value), value


def text_problem(sentence: object) -> str | None:
    """Why ``sentence`` cannot be translated, with the fix, or None: it is not a string, or it holds a lone
    surrogate (a JSON escape such as "\\ud800", or bytes decoded with "surrogateescape"), which no encoding of
    text can hold and which the tokenizers and a JSON answer cannot write."""
    if not isinstance(sentence, str):
        return f"is a {type(sentence).__name__}, not a string; give raw text (str)"
    try:
        sentence.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"holds a lone surrogate (U+{ord(sentence[e.start]):04X}) at character {e.start}, which is not "
                "text; give valid Unicode text")
    return None


def _check_sentence_list(sentences: object, call: str) -> None:
    """Refuse, naming the argument, ``sentences`` that are not an iterable of sentences (None, a number, bytes)."""
    if isinstance(sentences, (bytes, bytearray)) or not isinstance(sentences, Iterable):
        raise UsageError(f"{call}: sentences is {sentences!r:.40}, not a list of strings; give a list of raw "
                         "sentences (or one string to translate() for one translation)")


def searched_rows(ids: Sequence[torch.Tensor]) -> list[int]:
    """The indices of the sources with something to translate. A source of nothing but </s> (an empty or
    whitespace-only sentence: the tokenizer kept nothing) translates to the empty string without a search,
    as OpenNMT-py's server does: searched, it would get whatever the model says to nothing ("Ein.")."""
    return [k for k, row in enumerate(ids) if len(row) > 1]


def blank_translation(sentence: str, *, alignment: bool = False, terms: Optional[Terms] = None) -> Translation:
    """The translation of a sentence with nothing to translate (``searched_rows``): one hypothesis, the empty
    string, with score 0 (an empty sum of log-probabilities) and no tokens or attention (nor any of ``terms``)."""
    texts = list(terms.texts) if terms else []
    return Translation(sentence, [], [TranslatedHypothesis("", [], 0.0, [], [] if alignment else None, texts)],
                       constraints=texts)


def load(path: str | Path, data: str | Path | None = None, *, engine: str = "auto", bf16: bool = False,
         quantize: str = "none", compile: bool = False, threads: int | None = None, trust_compiled: bool = False,
         user_dir: str | Path | None = None, seed: int = 1,
         glossary: str | Path | Mapping[str, str] | None = None) -> TranslationModel:
    """A model ready to translate raw text: a model folder (nmt-export), or checkpoint(s) (':'-joined: an
    ensemble) with ``data``, the data-bin they were trained on. ``engine`` runs it: "torch", or a model folder's
    "onnxruntime", "compiled" or "ctranslate2" files (nmt-export --with), or "auto" (the first of those the folder
    holds that loads here, said on stderr; torch for checkpoints). ``bf16`` runs the weights in bfloat16,
    ``quantize="int8"`` (or ``"fp16"``) the linear layers with int8 (fp16) weights on the CPU; ``compile``
    compiles the decoder step (nmt-generate's --compile: the first translations of each kind of search
    compile it, later ones run faster); ``trust_compiled`` loads a compiled package not built on this machine by
    this user; ``user_dir`` imports a folder of plugins the model needs; ``glossary`` (a file of
    'source term<TAB>target term' lines, or ``{source term: target term}``) forces its target terms into the
    translations of sentences where its source terms occur."""
    from nmt.data.data_bin import open_data_dir
    from nmt.engines.selection import load_engine
    from nmt.fields import to_dataclass
    from nmt.generation.loading import model_and_data
    from nmt.model_folder.layout import is_model_folder, read_manifest
    from nmt.plugin_loader import load_plugins

    if not isinstance(path, (str, os.PathLike)) or not str(path).strip(":"):
        raise UsageError(f"nmt.load(path): path is {path!r}; give a model folder written by nmt-export, or "
                         "checkpoint(s) with data=<the data-bin they were trained on>")
    load_plugins(user_dir)
    for part in (p for p in str(path).split(":") if p):
        _check_model_path(str(path), Path(part))
    data_dir, paths = model_and_data(str(data) if data else None, str(path))
    if not data_dir:
        raise UsageError(f"nmt.load({str(path)!r}): a checkpoint needs data=<the data-bin it was trained on> "
                         "(or export a model folder with nmt-export)")
    folder = open_data_dir(data_dir, None, None)
    inference = to_dataclass(InferenceConfig, {"path": paths, "engine": engine, "bf16": bf16, "quantize": quantize,
                                               "compile": compile, "threads": threads,
                                               "trust_compiled": trust_compiled},
                             where="nmt.load().")  # checked: a bad value is one ConfigError line
    loaded = load_engine(inference, folder)
    info = read_manifest(paths) if paths and is_model_folder(paths) else {}
    return TranslationModel(loaded, folder, str(paths), seed=seed, info=info, glossary=glossary)


def _check_model_path(given: str, part: Path) -> None:
    """Refuse, naming what it is, a ``part`` of nmt.load's path that is neither a checkpoint file nor a model
    folder: a missing path, a data-bin, another folder."""
    from nmt.data.metadata import METADATA_FILE
    from nmt.model_folder.layout import MANIFEST, is_model_folder

    where = f"nmt.load({given!r})" + ("" if str(part) == given else f": {part}")
    if not part.exists():
        raise UsageError(f"{where}: no such checkpoint or model folder")
    if part.is_dir() and not is_model_folder(part):
        if (part / METADATA_FILE).exists():
            raise UsageError(f"{where}: is a data-bin (nmt-preprocess), not a model; give a model folder written by "
                             f"nmt-export, or a checkpoint with data={str(part)!r}")
        raise UsageError(f"{where}: is a folder without {MANIFEST}, not a model folder; give a model folder written "
                         "by nmt-export, or a checkpoint file (e.g. checkpoint_best.pt) with data=<its data-bin>")
