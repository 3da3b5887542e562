"""What nmt-generate and nmt-interactive share: opening the data-bin's dictionaries, loading the
checkpoint(s) as an ensemble, and translating a padded batch with the configured search."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np
import torch

from nmt.config.generate import GenerationConfig, InferenceConfig
from nmt.errors import ConfigError, UsageError
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.guards import check_finite_hypotheses, check_lengths, within_positions
from nmt.generation.search import Hypothesis, Search, SourceBatch, build_search
from nmt.generation.search_options import check_fits_model
from nmt.models.attention import AttentionBase
from nmt.models.row_buckets import BucketedLinear, PackedProjection, pack_weight


@dataclass
class DataDir:
    """A data-bin folder's languages and dictionaries."""

    path: Path
    src: str
    tgt: str
    src_dict: Any
    tgt_dict: Any


def open_data_dir(data: str | None, source_lang: str | None, target_lang: str | None) -> DataDir:
    """The languages (from the flags or metadata.json) and dictionaries of ``data``; of its first shard
    when it is sharded (``a:b``, whose shards must share the dictionaries), where its test and
    validation splits are too (fairseq's convention)."""
    from nmt.data.data_dir import resolve_langs
    from nmt.data.data_shards import data_shards
    from nmt.data.dictionary import Dictionary
    from nmt.data.shard_checks import check_same_dictionaries

    shards = data_shards(data) if data else [data]
    src, tgt = resolve_langs(shards[0], source_lang, target_lang)
    assert shards[0] is not None  # resolve_langs refuses a missing folder
    folder = Path(shards[0])
    for lang in (src, tgt):
        if not (folder / f"dict.{lang}.txt").exists():  # one that is not a regular file is named by Dictionary.load
            raise UsageError(f"{folder}: no dict.{lang}.txt; check --source-lang/--target-lang or re-run "
                             "nmt-preprocess")
    check_same_dictionaries([str(s) for s in shards], src, tgt)
    src_dict = Dictionary.load(folder / f"dict.{src}.txt")
    tgt_dict = Dictionary.load(folder / f"dict.{tgt}.txt")
    return DataDir(folder, src, tgt, src_dict, tgt_dict)


def checkpoint_paths(spec: str | None) -> list[str]:
    """``--path a.pt:b.pt`` -> ["a.pt", "b.pt"] (each a checkpoint or a model folder)."""
    paths = [p for p in (spec or "").split(":") if p]
    if not paths:
        raise UsageError("--path is required: the checkpoint or model folder to translate with (several joined "
                         "by ':' form an ensemble), e.g. --path checkpoints/checkpoint_best.pt")
    return paths


def model_and_data(data: str | None, path: str | None) -> tuple[str | None, str | None]:
    """(DATA, --path) with a model folder standing in for what is missing: ``CMD MODEL_DIR`` translates
    with the folder's model, ``CMD --path MODEL_DIR`` reads the folder's dictionaries and text pipeline
    (``--path DIR1:DIR2``, an ensemble of folders, reads the first one's)."""
    from nmt.model_folder.layout import is_model_folder

    if not path and is_model_folder(data):
        return data, data
    folders = [p for p in (path or "").split(":") if p]
    if not data and folders and all(is_model_folder(p) for p in folders):
        return folders[0], path
    return data, path


def refuse_model_folder_as_data(data: str, splits: str) -> None:
    """A model folder holds no splits: generating or scoring needs the data-bin beside it."""
    from nmt.model_folder.layout import is_model_folder

    if is_model_folder(data):
        raise UsageError(f"DATA {data} is a model folder, which holds no splits ({splits}); give the data-bin "
                         f"that holds them and the folder as --path: DATA_BIN --path {data}")


def load_model(path: str, src_dict: Any, tgt_dict: Any, state: dict[str, Any] | None = None) -> torch.nn.Module:
    """Build the model a checkpoint describes and load its weights; its dictionaries must match, its
    stored config must fit its tensors before anything is allocated (an edited config is refused) and its
    parameters must be finite. ``state``: the checkpoint at ``path`` when the caller has read it already."""
    from nmt.checkpoint.format import load_model_for_inference, model_parts
    from nmt.checkpoint.model_fit import build_model_from_weights
    from nmt.checkpoint.verify import check_dictionaries
    from nmt.model_folder.layout import is_model_folder, load_model_folder

    folder = is_model_folder(path)
    if folder:
        model_cfg, weights, fingerprints = load_model_folder(path)
    else:
        model_cfg, weights, fingerprints = model_parts(state) if state is not None else load_model_for_inference(path)
    check_dictionaries({"dictionaries": fingerprints}, path, {"source": src_dict, "target": tgt_dict})
    source = f"model folder {path}" if folder else f"checkpoint {path}"
    fix = ("export the model again with nmt-export" if folder
           else "the file is damaged or its config was edited; use the checkpoint as nmt-train wrote it")
    model = build_model_from_weights(model_cfg, weights, src_dict, tgt_dict, source=source, what="model config",
                                     fix=fix)
    return model.eval()


def load_ensemble(spec: str | None, src_dict: Any, tgt_dict: Any) -> EnsembleModel:
    return EnsembleModel([load_model(p, src_dict, tgt_dict) for p in checkpoint_paths(spec)])


def autocast(bf16: bool) -> ContextManager:
    """bfloat16 autocast for the models when --bf16, else nothing."""
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def inference_weights(ens: EnsembleModel, bf16: bool, pack: bool = True) -> EnsembleModel:
    """The members' weights as eager generation runs them, in place.

    ``bf16`` (--bf16): the weights, and so every activation, in bfloat16; the ensemble still turns logits into fp32
    log-probabilities. Casting the weights once beats autocast, which re-casts every weight at every decoding step
    (beam 5 on Multi30k test: about 1.7x the speed of autocast on a 2-core avx512_bf16 CPU, docs/generation.md).

    ``pack``: the linear layers and the output projection also keep their weights in oneDNN's layout
    (``nmt.models.row_buckets.pack_weight``), in bf16 and in fp32: steps of a few rows about twice as fast in their
    products (bf16: the same results bit for bit; fp32: to the last bits). Not for --compile, whose inductor packs
    the weights it freezes itself. With ``pack`` a bf16 decoding step also attends in fp32
    (:func:`fp32_attention_caches`)."""
    for m in ens.models:
        if bf16:
            m.to(torch.bfloat16)
        if pack:
            pack_linear_layers(m)
            if bf16:
                fp32_attention_caches(m)
    return ens


def fp32_attention_caches(model: torch.nn.Module) -> None:
    """In place: the attention modules of a bf16 ``model`` that allow it keep their decoding cache in fp32 and
    attend in fp32 (``AttentionBase.cache_dtype``). oneDNN builds a kernel for each shape of a bf16 batched
    product, and a step's attention products take a new shape at nearly every step (the keys grow by one, rows
    leave and join): greedy decoding of Multi30k's test set built 849 of them, about 0.34 s of its 4 s. fp32
    products run on MKL, which builds nothing (docs/generation.md)."""
    for module in model.modules():
        if isinstance(module, AttentionBase) and module.supports_fp32_cache:
            module.cache_dtype = torch.float32


def pack_linear_layers(model: torch.nn.Module) -> None:
    """In place: every BucketedLinear of a bf16 or fp32 CPU ``model`` keeps a packed copy of its weight, and a decoder
    with an ``output_weight`` gets a packed output projection (nothing where packing is not available)."""
    for module in model.modules():
        if isinstance(module, BucketedLinear):
            module.pack()
    decoder = getattr(model, "decoder", None)
    weight = getattr(decoder, "output_weight", None)
    if decoder is not None and weight is not None and getattr(decoder, "output_projection", None) is None:
        packed = pack_weight(weight)
        if packed is not None:
            decoder.output_projection = PackedProjection(packed, weight.size(0))


def pad_batch(rows: Sequence[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D id tensors into (B, S) and their lengths (B,)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    out = torch.full((len(rows), int(lengths.max())), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, lengths


def source_batches(dataset: Any, batches: Iterable[Sequence[int] | np.ndarray]) -> Iterator[SourceBatch]:
    """Batches of sentence indices of a language-pair dataset, as a search takes them."""
    for indices in batches:
        batch = dataset.collater([dataset[int(i)] for i in indices])
        yield batch["id"].tolist(), batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"]


@dataclass
class Translator:
    """An ensemble plus a search: source ids in, hypotheses out, with timing kept."""

    ens: EnsembleModel
    search: Search
    seconds: float = 0.0  # time spent searching
    sentences: int = 0
    tokens: int = 0  # generated tokens of the best hypotheses, eos included

    def translate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, need_attn: bool = False,
                  where: Callable[[int], str] = lambda k: f"sentence {k}") -> list[list[Hypothesis]]:
        """The hypotheses of each row of ``src_tokens``; a row without a finite one is an error
        naming ``where(row)``."""
        start = time.perf_counter()
        with torch.inference_mode():
            hyps = self.search.search(self.ens, src_tokens, src_lengths, need_attn=need_attn)
        self.seconds += time.perf_counter() - start
        for k, row in enumerate(hyps):
            check_finite_hypotheses(row, where(k))
        self.sentences += len(hyps)
        self.tokens += sum(len(h[0].tokens) for h in hyps if h)
        return hyps

    def translate_stream(self, batches: Iterable[SourceBatch], need_attn: bool = False,
                         where: Callable[[int], str] = lambda i: f"sentence {i}",
                         ) -> Iterator[tuple[int, list[Hypothesis]]]:
        """(sentence id, hypotheses) for every sentence of ``batches``, in the order they finish:
        the search starts waiting sentences as running ones finish (``Search.search_stream``). A
        sentence without a finite hypothesis is an error naming ``where(id)``."""
        stream = self.search.search_stream(self.ens, batches, need_attn=need_attn)
        while True:
            start = time.perf_counter()
            with torch.inference_mode():
                item = next(stream, None)
            self.seconds += time.perf_counter() - start
            if item is None:
                return
            check_finite_hypotheses(item[1], where(item[0]))
            self.sentences += 1
            self.tokens += len(item[1][0].tokens) if item[1] else 0
            yield item

    def max_source_positions(self) -> int:
        """The longest source every model of the ensemble was built for."""
        return self.ens.max_source_positions()

    def check_source_lengths(self, lengths: Sequence[int] | np.ndarray, where: Callable[[int], str],
                             fix: str = "split the sentence") -> None:
        """Refuse a source longer than every model of the ensemble was built for (its
        ``model.max_source_positions``): searching it would cost memory quadratic in its length.
        ``where(k)`` names the k-th source for the message."""
        check_lengths(lengths, self.max_source_positions(), where, "source", fix)

    def speed(self) -> str:
        return speed_line(self.sentences, self.tokens, self.seconds)


def speed_line(sentences: int, tokens: int, seconds: float) -> str:
    """nmt-generate's speed line (the search's time only)."""
    s = max(seconds, 1e-9)
    return (f"translated {sentences} sentences ({tokens} tokens) in {seconds:.1f}s "
            f"({sentences / s:.2f} sentences/s, {tokens / s:.2f} tokens/s)")


def batch_sentences(inf: InferenceConfig) -> int | None:
    """The most sentences in a batch: --batch-size, else 128 unless --max-tokens bounds the batches alone."""
    return inf.batch_size or (None if inf.max_tokens else 128)


def split_location(folder: str, split: str) -> Callable[[int], str]:
    """Names sentence k of a split in a message."""
    return lambda k: f"{folder}: split {split}, sentence {k}"


def make_translator(gen: GenerationConfig, inf: InferenceConfig, data: DataDir, seed: int) -> Translator:
    ens = load_inference_models(inf, data)
    return Translator(ens, search_for(gen, ens, data, seed))


def load_inference_models(inf: InferenceConfig, data: DataDir) -> EnsembleModel:
    """The models of ``--path`` as an ensemble ready to decode (threads set, --bf16 or --quantize applied,
    --compile'd)."""
    from nmt.allocator import keep_built_kernels, keep_freed_memory

    keep_freed_memory()
    keep_built_kernels()
    if inf.threads:
        torch.set_num_threads(inf.threads)
    if inf.bf16 and inf.quantize != "none":
        raise ConfigError(f"--bf16 and --quantize {inf.quantize}: choose one ({inf.quantize} weights replace the fp32 "
                          "ones)")
    if inf.compile and inf.quantize != "none":
        raise ConfigError(f"--compile and --quantize {inf.quantize}: choose one (torch.compile does not take the "
                          "dynamic-quantized layers); --compile --bf16 is the faster pair on the CPU")
    ens = load_ensemble(inf.path, data.src_dict, data.tgt_dict)
    if inf.quantize != "none":
        from nmt.generation.quantize import quantize_models

        return quantize_models(ens, inf.quantize)
    inference_weights(ens, inf.bf16, pack=not inf.compile)
    if inf.compile:
        ens.compile_decoders()
    return ens


def search_for(gen: GenerationConfig, ens: EnsembleModel, data: DataDir, seed: int) -> Search:
    """The search ``gen`` configures, for these models (their decoder start, their longest output); options the
    models cannot honour are refused here, for every caller (nmt.generation.search_options)."""
    check_fits_model(gen, ens.max_target_positions(), data.tgt_dict, str(data.path / f"dict.{data.tgt}.txt"))
    start = decoder_start(ens, data.tgt_dict)
    gen = within_positions(gen, ens.max_target_positions())
    return build_search(gen, data.tgt_dict, seed=seed, decoder_start=start)


def decoder_start(ens: EnsembleModel, tgt_dict: Any) -> int | None:
    """The decoder's first input symbol the models were trained with (None: the dictionary's <s>);
    models imported from fairseq start from </s> (model.decoder_start)."""
    symbols = {getattr(m.cfg, "decoder_start", "<s>") for m in ens.models}
    if len(symbols) > 1:
        raise UsageError(f"--path: the ensemble mixes models whose decoder starts from {' and '.join(sorted(symbols))} "
                         "(nmt-trained and fairseq-imported); ensemble models of one kind")
    symbol = symbols.pop()
    return None if symbol == "<s>" else tgt_dict.index(symbol)


def teacher_forced_attention(model: Any, src_tokens: torch.Tensor, tokens: torch.Tensor, first: int) -> torch.Tensor:
    """(layers, heads, T, S) encoder-decoder attention of one translation: ``tokens`` (T,) fed back to the model
    after the decoder's ``first`` symbol, over ``src_tokens`` (S,), in one teacher-forced pass (the search never
    has to keep every head of every layer)."""
    prev = torch.cat([torch.tensor([first]), tokens[:-1]]).unsqueeze(0)  # (1, T)
    with torch.inference_mode():
        layers = model.attention_weights(src_tokens.unsqueeze(0), torch.tensor([len(src_tokens)]), prev)["cross"]
    return torch.stack([w[0].float() for w in layers])


def hard_alignment(attn: torch.Tensor, src_len: int) -> list[tuple[int, int]]:
    """(source position, target position) pairs: each target token but the eos to the source token
    (not the eos) it attends most. ``attn`` is (T, S) for one hypothesis; ``src_len`` counts the eos."""
    words = max(src_len - 1, 1)
    best = attn[:-1, :words].argmax(dim=1).tolist()  # (T-1,)
    return [(s, t) for t, s in enumerate(best)]
