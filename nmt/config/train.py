"""The configuration of `nmt-train`: one dataclass per concern, fairseq's flag names throughout.

``TrainJob`` is the whole tree; the flags are generated from it (``--max-tokens`` writes
``task.max_tokens``). The optimizer, LR scheduler and criterion are plugin groups: their own
options (``--adam-betas``, ``--warmup-updates``, ``--label-smoothing``) come from the plugins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from nmt.config.common import CommonConfig
from nmt.config.model import ModelConfig
from nmt.fields import opt, plugin_group

EVAL_BLEU = "eval bleu"  # the --help section of the --eval-bleu options
PIPELINE = "pipeline"  # --eval-bleu-detok / --eval-bleu-remove-bpe: undo what the data-bin's text pipeline did


@dataclass
class TaskConfig:
    """Which data to read and how to cut it into batches."""

    data: str = opt("", "The data-bin folder written by nmt-preprocess (the positional DATA argument); several "
                        "joined by ':' are shards: epoch k trains on shard (k-1) mod n, validation on the first.",
                    cli=False)
    source_lang: Optional[str] = opt(None, "Source language suffix (read from the data-bin when there is one pair).")
    target_lang: Optional[str] = opt(None, "Target language suffix (read from the data-bin when there is one pair).")
    train_subset: str = opt("train", "The split to train on.")
    valid_subset: str = opt("valid", "The split(s) to validate on, comma separated; "
                                     "the first one picks the best checkpoint.")
    max_tokens: Optional[int] = opt(None, "Maximum tokens (source or target, padding included) in a batch.", low=1)
    batch_size: Optional[int] = opt(None, "Maximum sentences in a batch.", low=1)
    max_tokens_valid: Optional[int] = opt(None, "--max-tokens for validation [default: --max-tokens].", low=1)
    batch_size_valid: Optional[int] = opt(None, "--batch-size for validation [default: --batch-size].", low=1)
    required_batch_size_multiple: int = opt(8, "Batch sizes are rounded to a multiple of this (fast matrix shapes).",
                                            low=1)
    skip_invalid_size_inputs_valid_test: bool = opt(False, "Skip sentences longer than the limits instead of failing.")
    num_workers: int = opt(0, "Data loading worker processes (0 = load in the training process; best on few cores).",
                           low=0)
    validate_interval: int = opt(1, "Validate every N epochs.", low=1)
    validate_interval_updates: int = opt(0, "Also validate every N updates (0 = only at epoch ends).", low=0)
    disable_validation: bool = opt(False, "Do not validate (no best checkpoint, no --patience).")
    eval_bleu: bool = opt(False, "At each validation also translate every validation subset and log sacreBLEU's "
                                 "bleu and chrf (choose checkpoint_best by them with --best-checkpoint-metric bleu "
                                 "--maximize-best-checkpoint-metric).", group=EVAL_BLEU)
    eval_bleu_args: str = opt("{}", "JSON of nmt-generate's search options for --eval-bleu, e.g. "
                                    "'{\"beam\": 4, \"max_len_a\": 1.2, \"max_len_b\": 10}' "
                                    "[default: nmt-generate's defaults].", group=EVAL_BLEU)
    eval_bleu_detok: str = opt(PIPELINE, "How --eval-bleu detokenizes hypotheses and references: pipeline (the "
                                         "data-bin's own tokenizer, as nmt-generate) or a tokenizer plugin "
                                         "(space: leave the tokens as they are; moses).", group=EVAL_BLEU)
    eval_bleu_detok_args: str = opt("{}", "JSON of the options of the --eval-bleu-detok tokenizer plugin, e.g. "
                                          "'{\"moses_aggressive_dash_splits\": true}'.", group=EVAL_BLEU)
    eval_bleu_remove_bpe: str = opt(PIPELINE, "How --eval-bleu removes subwords: pipeline (the data-bin's own "
                                              "subword model, as nmt-generate) or none (score the subwords).",
                                    choices=[PIPELINE, "none"], group=EVAL_BLEU)
    eval_tokenized_bleu: bool = opt(False, "--eval-bleu scores tokenized text: no detokenization, and sacreBLEU "
                                           "with tokenize=none.", group=EVAL_BLEU)
    eval_bleu_print_samples: bool = opt(False, "Log the first hypothesis and reference of each --eval-bleu subset.",
                                        group=EVAL_BLEU)


@dataclass
class OptimizationConfig:
    """How long to train and how each update is made."""

    lr: float = opt(5e-4, "Peak learning rate (the LR scheduler shapes it over time).", low=0)
    clip_norm: float = opt(0.0, "Clip the gradient norm to this (0 = no clipping; the norm is still logged).", low=0)
    max_epoch: int = opt(0, "Stop after this many epochs (0 = no limit).", low=0)
    max_update: int = opt(0, "Stop after this many updates (0 = no limit).", low=0)
    stop_time_hours: float = opt(0.0, "Stop after this much training time, in hours, summed over resumes; time "
                                      "spent validating and writing checkpoints does not count (0 = no limit).",
                                 low=0)
    update_freq: int = opt(1, "Accumulate the gradients of N batches per update (simulates N times more workers).",
                           low=1)
    ema_decay: float = opt(0.0, "Keep an exponential moving average of the weights with this decay per update "
                                "(e.g. 0.999; 0 = off), in fp32: validation, checkpoint_best.pt and every "
                                "checkpoint's model are then the average.", low=0, high=1, high_open=True)


@dataclass
class CheckpointConfig:
    """Where checkpoints go, which ones are kept, and early stopping."""

    save_dir: str = opt("checkpoints", "Folder for checkpoints, config.yaml and the JSON training log.")
    restore_file: str = opt("checkpoint_last.pt", "Checkpoint to resume from (a name inside --save-dir, or a path).")
    reset_optimizer: bool = opt(False, "When restoring, do not load the optimizer state.")
    reset_lr_scheduler: bool = opt(False, "When restoring, do not load the LR scheduler state.")
    reset_dataloader: bool = opt(False, "When restoring, start a fresh epoch instead of the saved position.")
    reset_meters: bool = opt(False, "When restoring, do not load the saved meters.")
    save_interval: int = opt(1, "Save a checkpoint every N epochs.", low=1)
    save_interval_updates: int = opt(0, "Also save a checkpoint every N updates (0 = only at epoch ends).", low=0)
    keep_interval_updates: int = opt(-1, "Keep only the last N update checkpoints (-1 = all).", low=-1)
    save_at_progress: str = opt("", "Also save checkpoint_progress_P.pt when the training progress (the share "
                                    "of --stop-time-hours / --max-update spent) reaches each P, comma separated, "
                                    "e.g. 0.92,0.94,0.96,0.98,1 for five to average over the last tenth.")
    keep_last_epochs: int = opt(-1, "Keep only the last N epoch checkpoints (-1 = all).", low=-1)
    keep_best_checkpoints: int = opt(-1, "Keep the N best checkpoints by the best metric (-1 = none besides "
                                         "checkpoint_best).", low=-1)
    no_save: bool = opt(False, "Do not save any checkpoint.")
    no_epoch_checkpoints: bool = opt(False, "Only save checkpoint_last.pt and checkpoint_best.pt.")
    no_last_checkpoints: bool = opt(False, "Do not save checkpoint_last.pt.")
    best_checkpoint_metric: str = opt("loss",
                                      "Validation metric that chooses checkpoint_best.pt (loss, nll_loss, ppl; "
                                      "bleu, chrf with --eval-bleu).")
    maximize_best_checkpoint_metric: bool = opt(False, "A higher best metric is better (e.g. for BLEU).")
    patience: int = opt(-1, "Stop when the best metric has not improved for N validations (-1 = never).", low=-1)
    requeue_on_preemption: bool = opt(False, "After a SIGTERM/SIGUSR1 has been answered by saving checkpoint_last.pt, "
                                             "requeue the SLURM job (scontrol requeue $SLURM_JOB_ID).")


@dataclass
class DistributedTrainingConfig:
    """Several processes, each with a disjoint share of the batches; gradients are averaged."""

    distributed_world_size: int = opt(1, "Number of processes. Under torchrun it is read from WORLD_SIZE; "
                                         "otherwise N > 1 spawns N local workers.", low=1)
    distributed_rank: int = opt(0, "This process's rank (read from RANK under torchrun).", low=0)
    distributed_backend: Optional[str] = opt(None, "torch.distributed backend [default: nccl on GPU, gloo on CPU].",
                                             choices=["nccl", "gloo"])
    distributed_init_method: Optional[str] = opt(None, "Rendezvous URL, e.g. tcp://host:port "
                                                       "[default: env:// under torchrun, else a free local port].")
    distributed_port: int = opt(-1, "Port for the local rendezvous when spawning workers (-1 = pick a free one).",
                                low=-1, high=65535)
    device_id: int = opt(0, "GPU index of this process (read from LOCAL_RANK under torchrun).", low=0)
    ddp_backend: str = opt("pytorch_ddp", "How gradients are synchronised: pytorch_ddp (DistributedDataParallel, "
                                          "alias c10d) or legacy_ddp (one all-reduce per update).",
                           choices=["pytorch_ddp", "c10d", "legacy_ddp"])
    ddp_timeout: int = opt(1800, "Seconds a collective may wait for the other ranks before failing.", low=1)
    bucket_cap_mb: int = opt(25, "DistributedDataParallel gradient bucket size in MB.", low=1)
    find_unused_parameters: bool = opt(False, "Let DDP tolerate parameters that get no gradient (slower).")
    cpu: bool = opt(False, "Train on the CPU even when CUDA is available.")
    num_threads: int = opt(0, "torch intra-op threads per process (0 = the cores divided by the local processes).",
                           low=0)


@dataclass
class PrecisionConfig:
    """Mixed precision. Master weights and optimizer state always stay fp32."""

    bf16: bool = opt(False, "Autocast to bfloat16 (CPU or GPU); no loss scaling needed.")
    fp16: bool = opt(False, "Autocast to float16 on CUDA with dynamic loss scaling.")
    fp16_init_scale: float = opt(128.0, "Initial loss scale for --fp16.", low=0, low_open=True)
    fp16_scale_window: Optional[int] = opt(None, "Updates without overflow before the loss scale doubles "
                                                 "[default: 2**14 / world size / update freq].", low=1)
    fp16_scale_tolerance: float = opt(0.0, "Fraction of overflowing updates tolerated before the scale is lowered.",
                                      low=0, high=1)
    min_loss_scale: float = opt(1e-4, "Stop with an error when the loss scale falls below this (training diverged).",
                                low=0)
    threshold_loss_scale: Optional[float] = opt(None, "Never lower the loss scale below this (a floor).", low=0,
                                                low_open=True)


@dataclass
class LoggingConfig:
    """What a person sees while training runs."""

    log_interval: int = opt(100, "Print a log line every N updates.", low=1)
    log_format: Optional[str] = opt(None, "Log lines as simple text or json, or none [default: simple; "
                                          "a progress bar is added on a terminal].",
                                    choices=["simple", "json", "none"])
    tensorboard_logdir: Optional[str] = opt(None, "Write TensorBoard events here (needs tensorboard installed).")


@dataclass
class TrainJob:
    """Everything `nmt-train` needs."""

    common: CommonConfig = field(default_factory=CommonConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    optimizer: Dict[str, Any] = plugin_group("optimizer", "adam", "The optimizer.", group="optimizer")
    lr_scheduler: Dict[str, Any] = plugin_group("lr_scheduler", "inverse_sqrt", "The learning-rate schedule.",
                                                group="lr scheduler")
    criterion: Dict[str, Any] = plugin_group("criterion", "label_smoothed_cross_entropy", "The training loss.",
                                             group="criterion")
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed_training: DistributedTrainingConfig = field(default_factory=DistributedTrainingConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
