"""--eval-bleu: choose checkpoints by translation quality, not only by loss.

At each validation every validation subset is translated with nmt-generate's search (the options
of --eval-bleu-args) and scored with sacreBLEU: ``bleu`` and ``chrf`` join the subset's validation
record, so ``--best-checkpoint-metric bleu --maximize-best-checkpoint-metric`` (and --patience) can
use them. Hypotheses and references are post-processed the same way: subwords removed with the
data-bin's own BPE (--eval-bleu-remove-bpe), then detokenized with the data-bin's own tokenizer or a
named one (--eval-bleu-detok). With both left at ``pipeline`` the references are the raw text
nmt-preprocess kept (DATA/raw/SPLIT.TGT), as nmt-generate scores, so the figures agree with it.

Training is not disturbed: the random generators' states are put back, the model returns to train
mode, and only rank 0 translates (the search runs on the CPU; a CUDA model is copied to a CPU
replica) and sends the scores to the other ranks, so every rank logs and compares the same figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from nmt.config.generate import GenerationConfig
from nmt.config.train import PIPELINE, TrainJob
from nmt.data.data_bin import DataDir
from nmt.data.data_shards import first_shard
from nmt.data.dictionary import Dictionary
from nmt.data.language_pair_dataset import LanguagePairDataset
from nmt.data.text_pipeline import TextPipeline
from nmt.errors import ConfigError
from nmt.training.distributed import DistributedContext

SCORES = ("bleu", "chrf")  # what --eval-bleu adds to a validation record
EXAMPLE = """'{"beam": 4}'"""


@dataclass
class EvalBleuOptions:
    """The checked --eval-bleu options."""

    generation: GenerationConfig  # --eval-bleu-args over nmt-generate's defaults
    postprocess: Callable[[str], str]  # model text (subwords) -> what sacreBLEU scores
    raw_references: bool  # score against DATA/raw/SPLIT.TGT when nmt-preprocess kept it
    tokenize: str | None  # sacreBLEU's BLEU tokenizer (None: its default, 13a)


def _json_object(flag: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {text!r}: not valid JSON ({e.msg}); give an object, e.g. {EXAMPLE}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} {text!r}: give a JSON object of options, e.g. {EXAMPLE}")
    return value


def search_options(text: str) -> GenerationConfig:
    """--eval-bleu-args as nmt-generate's options, checked as nmt-generate checks its flags: a key is a
    flag's name with underscores (``max_len_a``, ``search``, ``temperature``) or a config path."""
    from omegaconf import OmegaConf

    from nmt.config.cli_options import flag_specs
    from nmt.config.loader import resolve_config

    flag = "--eval-bleu-args"
    values = _json_object(flag, text)
    paths = {spec.flag[2:].replace("-", "_"): spec.path for spec in flag_specs(GenerationConfig)}
    flags = {k if isinstance(v, dict) else paths.get(k, k): v for k, v in values.items()}
    try:
        cfg = resolve_config(GenerationConfig, flags=flags, flags_source=flag)
    except ConfigError as e:
        message = str(e)
        raise ConfigError(message if message.startswith(flag) else f"{flag}: {message}") from None
    gen: GenerationConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    return gen


def _detokenizer(cfg: TrainJob, pipeline: TextPipeline, tgt: str) -> Callable[[str], str]:
    """The --eval-bleu-detok step: the data-bin's tokenizer or the named plugin with --eval-bleu-detok-args."""
    from nmt.data.text_pipeline import build_tokenizer
    from nmt.registry import TOKENIZER

    task = cfg.task
    args = _json_object("--eval-bleu-detok-args", task.eval_bleu_detok_args)
    if task.eval_bleu_detok == PIPELINE:
        if args:
            raise ConfigError("--eval-bleu-detok-args: options of a tokenizer named by --eval-bleu-detok; "
                              "the data-bin's own tokenizer (pipeline) keeps its recorded options")
        decode: Callable[[str], str] = pipeline.tokenizer.decode
        return decode
    if task.eval_bleu_detok not in TOKENIZER:
        raise ConfigError(f"--eval-bleu-detok {task.eval_bleu_detok}: choose {PIPELINE} or a tokenizer plugin: "
                          f"{', '.join(TOKENIZER.choices())}")
    try:
        return build_tokenizer({"name": task.eval_bleu_detok, **args}, tgt).decode
    except ConfigError as e:
        raise ConfigError(f"--eval-bleu-detok-args: {e}") from None


def eval_bleu_options(cfg: TrainJob) -> EvalBleuOptions | None:
    """The --eval-bleu options, checked before training starts (a mistake is one ConfigError line);
    None without --eval-bleu."""
    from nmt.data.data_dir import resolve_langs
    from nmt.data.text_pipeline import load_text_pipeline

    task, metric = cfg.task, cfg.checkpoint.best_checkpoint_metric
    if metric in SCORES and not (task.eval_bleu and not task.disable_validation):
        raise ConfigError(f"--best-checkpoint-metric {metric}: validation reports {metric} only with --eval-bleu "
                          "(and validation on); add --eval-bleu --maximize-best-checkpoint-metric")
    if metric in SCORES and not cfg.checkpoint.maximize_best_checkpoint_metric:
        raise ConfigError(f"--best-checkpoint-metric {metric}: a higher {metric} is better, and without "
                          "--maximize-best-checkpoint-metric the lowest would be kept; add it")
    if not task.eval_bleu or task.disable_validation:
        return None
    generation = search_options(task.eval_bleu_args)
    data = first_shard(task.data)  # validation reads the first shard of sharded data
    _, tgt = resolve_langs(data, task.source_lang, task.target_lang)
    pipeline = load_text_pipeline(data, tgt)
    remove_bpe: Callable[[str], str] = pipeline.bpe.decode if task.eval_bleu_remove_bpe == PIPELINE else str
    detok = str if task.eval_tokenized_bleu else _detokenizer(cfg, pipeline, tgt)
    raw = task.eval_bleu_remove_bpe == PIPELINE and task.eval_bleu_detok == PIPELINE and not task.eval_tokenized_bleu
    return EvalBleuOptions(generation, lambda text: detok(remove_bpe(text)), raw,
                           "none" if task.eval_tokenized_bleu else None)


class ValidationBleu:
    """Translates a validation subset with the model being trained and scores it (see the module doc)."""

    def __init__(self, cfg: TrainJob, options: EvalBleuOptions, src_dict: Dictionary, tgt_dict: Dictionary,
                 ctx: DistributedContext, log: Callable[[str], None]):
        from nmt.data.data_dir import resolve_langs

        self.cfg = cfg
        self.options = options
        self.ctx = ctx
        self.log = log
        data = first_shard(cfg.task.data)  # validation reads the first shard of sharded data
        src, tgt = resolve_langs(data, cfg.task.source_lang, cfg.task.target_lang)
        self.data_dir = DataDir(Path(data), src, tgt, src_dict, tgt_dict)
        self.replica: torch.nn.Module | None = None  # the CPU copy of a CUDA model
        self.references: dict[str, list[str]] = {}  # subset -> its references (read once)

    @classmethod
    def create(cls, cfg: TrainJob, src_dict: Dictionary, tgt_dict: Dictionary, ctx: DistributedContext,
               log: Callable[[str], None]) -> "ValidationBleu | None":
        """The scorer --eval-bleu asks for, or None without it."""
        options = eval_bleu_options(cfg)
        return None if options is None else cls(cfg, options, src_dict, tgt_dict, ctx, log)

    def scores(self, model: torch.nn.Module, subset: str, dataset: LanguagePairDataset) -> dict[str, float]:
        """{"bleu": ..., "chrf": ...} of ``model`` on ``dataset``, the same on every rank."""
        from nmt.checkpoint.rng_state import get_rng_state, set_rng_state

        found: list[Any] = [None]
        if self.ctx.is_master:
            rng, training = get_rng_state(), model.training
            try:
                found[0] = self._score(self._cpu_model(model), subset, dataset)
            finally:
                model.train(training)
                set_rng_state(rng)
        if self.ctx.is_distributed:
            torch.distributed.broadcast_object_list(found, src=0)
        return dict(found[0])

    def _cpu_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model itself on the CPU; else its weights in a CPU replica (the searches run on the CPU)."""
        if next(model.parameters()).device.type == "cpu":
            return model
        if self.replica is None:
            from nmt.cpu_speed import swap_layers
            from nmt.models.build import build_model

            self.replica = swap_layers(build_model(self.cfg.model, self.data_dir.src_dict, self.data_dir.tgt_dict))
        self.replica.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()})
        return self.replica

    def _score(self, model: torch.nn.Module, subset: str, dataset: LanguagePairDataset) -> dict[str, float]:
        from nmt.generation.output import corpus_scores

        task = self.cfg.task
        max_tokens = task.max_tokens_valid or task.max_tokens
        hyps = translate_split(model, self.data_dir, dataset, subset, self.options.generation, self.cfg.common.seed,
                               self.options.postprocess, max_tokens=max_tokens,
                               batch_size=task.batch_size_valid or task.batch_size,
                               skip_invalid=task.skip_invalid_size_inputs_valid_test, flag="--eval-bleu")
        if not hyps:
            return dict.fromkeys(SCORES, math.nan)
        ids = sorted(hyps)
        if subset not in self.references:
            self.references[subset], _ = split_references(self.data_dir, subset, dataset, self.options.postprocess,
                                                          self.options.raw_references)
        refs = self.references[subset]
        (bleu, _), (chrf, _) = corpus_scores([hyps[i] for i in ids], [refs[i] for i in ids],
                                             tokenize=self.options.tokenize)
        if self.cfg.task.eval_bleu_print_samples:
            self.log(f"--eval-bleu {subset} example hypothesis: {hyps[ids[0]]}")
            self.log(f"--eval-bleu {subset} example reference: {refs[ids[0]]}")
        return {"bleu": float(bleu.score), "chrf": float(chrf.score)}


def translate_split(model: torch.nn.Module, data: DataDir, dataset: LanguagePairDataset, subset: str,
                    generation: GenerationConfig, seed: int, postprocess: Callable[[str], str], *,
                    max_tokens: int | None, batch_size: int | None, skip_invalid: bool, flag: str) -> dict[int, str]:
    """Sentence id -> the first hypothesis of ``model`` (put in eval mode), post-processed (subwords removed,
    detokenized), for every sentence of ``dataset`` that fits; ``flag`` names the option in an error."""
    from nmt.data.batching import batch_by_size
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.inference import Translator, search_for, source_batches

    ens = EnsembleModel([model])  # puts the model in eval mode
    translator = Translator(ens, search_for(generation, ens, data, seed))
    plan = batch_by_size(dataset.src_sizes, None, max_tokens=max_tokens,
                         max_sentences=batch_size or (None if max_tokens else 128),
                         seed=None, max_source_positions=translator.max_source_positions(),
                         skip_invalid=skip_invalid, split=subset)
    hyps: dict[int, str] = {}
    for sid, found in translator.translate_stream(source_batches(dataset, plan.batches),
                                                  where=lambda i: f"{flag}: split {subset}, sentence {i}"):
        hyps[sid] = postprocess(data.tgt_dict.string(found[0].tokens)) if found else ""
    return hyps


def split_references(data: DataDir, subset: str, dataset: LanguagePairDataset, postprocess: Callable[[str], str],
                     raw: bool = True) -> tuple[list[str], Path | None]:
    """The raw text kept by nmt-preprocess when ``raw`` and it fits, else the target side post-processed like
    the hypotheses; and the raw text's file (None: the target side)."""
    from nmt.data.corpus_files import read_lines
    from nmt.data.data_dir import kept_raw_text

    kept = kept_raw_text(data.path, subset, data.tgt) if raw else None
    if kept is not None:
        lines = list(read_lines(kept))
        if len(lines) == len(dataset):
            return lines, Path(kept)
    string = data.tgt_dict.string
    return [postprocess(string(dataset[i]["target"])) for i in range(len(dataset))], None
