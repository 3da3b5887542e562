"""Which checkpoint files a run writes, which it keeps, which is best, and which it resumes from.

Names (fairseq's): ``checkpoint_last.pt`` on every save, ``checkpoint<epoch>.pt`` at the end of an
epoch, ``checkpoint_<epoch>_<updates>.pt`` every ``--save-interval-updates`` inside an epoch, and
``checkpoint_best.pt`` when the validation ``--best-checkpoint-metric`` improves; nmt's own
``checkpoint_progress_<p>.pt`` when the training progress reaches a point of ``--save-at-progress`` (never
pruned). One save serialises the state once; the other names are hard links to that file (see
``save_checkpoint``).

The training loop talks only to :class:`CheckpointManager`: ``resume(parts)`` at the start and
``save(parts, ...)`` after updates; the manager builds, checks and applies the states.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.format import build_state, load_checkpoint, save_checkpoint
from nmt.checkpoint.rng_state import set_rng_state
from nmt.checkpoint.verify import check_dictionaries, parameter_mismatch
from nmt.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from nmt.config.train import CheckpointConfig, TrainJob

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
_EPOCH_RE = re.compile(r"checkpoint(\d+)\.pt")
_UPDATES_RE = re.compile(r"checkpoint_(\d+)_(\d+)\.pt")
PROGRESS_RE = re.compile(r"checkpoint_progress_(\d\.\d+)\.pt")


def progress_name(point: float) -> str:
    """The file a --save-at-progress point is saved as: ``checkpoint_progress_0.920.pt``."""
    return f"checkpoint_progress_{point:.3f}.pt"
_METER_KEYS = ("meters", "train_time")  # the extra values --reset-meters forgets
# training-state entry -> (the --reset-* option that lets a run start without it, what it is called)
_RESETTABLE = {"optimizer": ("optimizer", "optimizer"), "lr_scheduler": ("lr_scheduler", "LR scheduler"),
               "iterator": ("dataloader", "data position")}


@dataclass
class TrainingParts:
    """The live objects a checkpoint saves and a resume restores (None: not part of this run).
    Each has ``state_dict()`` / ``load_state_dict()``; ``iterator`` is the epoch iterator; ``ema`` the
    --ema-decay weight average (``nmt.training.ema.WeightAverage``)."""

    model: torch.nn.Module
    optimizer: Any = None
    lr_scheduler: Any = None
    scaler: Any = None
    iterator: Any = None
    ema: Any = None


class CheckpointManager:
    """Saves, prunes and finds checkpoints in ``save_dir`` following the checkpoint options of ``cfg``.

    ``cfg`` is the run's checkpoint options (``--save-dir``, ``--keep-*``, ``--reset-*``, ...); ``config`` is
    the whole run's config (stored in each checkpoint), ``dictionaries`` the run's (checked on resume,
    fingerprinted on save); only a ``writer`` (rank 0) writes files, every rank tracks the best metric;
    ``rank`` picks this process's random generators out of a checkpoint several processes wrote."""

    def __init__(self, cfg: CheckpointConfig, *, config: TrainJob | None = None,
                 dictionaries: Mapping[str, Any] | None = None, writer: bool = True, rank: int = 0):
        self.cfg = cfg
        self.config = config
        self.dictionaries = dict(dictionaries or {})
        self.writer = writer
        self.rank = rank
        self.save_dir = Path(cfg.save_dir)
        self.metric: str = cfg.best_checkpoint_metric or "loss"
        self.maximize: bool = cfg.maximize_best_checkpoint_metric
        self.best: float | None = None  # best validation value so far (restored on resume)
        self.resumed_from: Path | None = None

    # ----------------------------------------------------------------------- best metric

    def metric_value(self, val_metrics: Mapping[str, float] | None) -> float | None:
        """The value of ``--best-checkpoint-metric`` in the validation metrics (None when not validated)."""
        if not val_metrics:
            return None
        if self.metric not in val_metrics:
            raise ConfigError(f"--best-checkpoint-metric {self.metric}: validation does not report it; "
                              f"choose one of: {', '.join(sorted(val_metrics))}")
        return float(val_metrics[self.metric])

    def is_better(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.maximize else value < self.best

    # ----------------------------------------------------------------------- saving

    def names(self, epoch: int, num_updates: int, end_of_epoch: bool,
              val_metrics: Mapping[str, float] | None = None, force_last: bool = False,
              progress_points: Sequence[float] = ()) -> list[str]:
        """The file names a save at this point writes (empty: nothing to save). Does not change ``best``.
        ``force_last``: write ``checkpoint_last.pt`` even between scheduled saves (the run is stopping);
        ``progress_points``: the --save-at-progress points reached since the last save."""
        if self.cfg.no_save:
            return []
        names = [progress_name(p) for p in progress_points]
        if end_of_epoch:
            if not self.cfg.no_epoch_checkpoints and epoch % self.cfg.save_interval == 0:
                names.append(f"checkpoint{epoch}.pt")
        else:
            every = self.cfg.save_interval_updates
            if every > 0 and num_updates % every == 0:
                names.append(f"checkpoint_{epoch}_{num_updates}.pt")
        value = self.metric_value(val_metrics)
        if self.is_better(value):
            names.append(BEST)
        if value is not None and self._in_top_best(value):
            names.append(f"checkpoint.best_{self.metric}_{value:.4f}.pt")
        if (names or end_of_epoch or force_last) and not self.cfg.no_last_checkpoints:
            names.append(LAST)
        return names

    def save(self, parts: TrainingParts, *, epoch: int, num_updates: int, end_of_epoch: bool,
             val_metrics: Mapping[str, float] | None = None, force_last: bool = False,
             extra: Mapping[str, Any] | None = None, rng_ranks: Sequence[Mapping[str, Any]] | None = None,
             progress_points: Sequence[float] = ()) -> list[Path]:
        """Record the validation in the best metric and, on the writer, write the run's state under every
        name due now (see :meth:`names`), then prune old files. Returns the files written. ``rng_ranks``:
        every rank's random generators (several processes), stored for :meth:`resume`.

        The state is built only when something is due; the best value so far goes inside it, so a
        resumed run keeps comparing against it."""
        names = self.names(epoch, num_updates, end_of_epoch, val_metrics, force_last, progress_points)
        value = self.metric_value(val_metrics)
        if self.is_better(value):
            self.best = value
        if not names or not self.writer:
            return []
        if self.config is None:
            raise TypeError("CheckpointManager.save needs the run's config (CheckpointManager(cfg, config=...))")
        state = build_state(
            model=parts.model, config=self.config, epoch=epoch, num_updates=num_updates,
            optimizer=parts.optimizer, lr_scheduler=parts.lr_scheduler, scaler=parts.scaler,
            iterator_state=parts.iterator.state_dict() if parts.iterator is not None else None,
            end_of_epoch=end_of_epoch, dictionaries=self.dictionaries,
            best={"metric": self.metric, "value": self.best}, extra=extra, rng_ranks=rng_ranks, ema=parts.ema)
        written = save_checkpoint([self.save_dir / n for n in names], state)
        self.prune()
        return written

    def _kept_best(self) -> list[tuple[float, Path]]:
        """The ``checkpoint.best_<metric>_<value>.pt`` files, best first."""
        regex = re.compile(rf"checkpoint\.best_{re.escape(self.metric)}_(-?[\d.]+(?:e-?\d+)?|nan|-?inf)\.pt")
        found = [(float(m.group(1)), p) for p in self.save_dir.glob("checkpoint.best_*.pt")
                 if (m := regex.fullmatch(p.name))]
        return sorted(found, key=lambda vp: vp[0], reverse=self.maximize)

    def _in_top_best(self, value: float) -> bool:
        keep = self.cfg.keep_best_checkpoints
        if keep <= 0 or math.isnan(value):
            return False
        kept = self._kept_best()
        if len(kept) < keep:
            return True
        worst = kept[keep - 1][0]
        return value > worst if self.maximize else value < worst

    def prune(self) -> None:
        """Delete the oldest epoch / interval checkpoints beyond ``--keep-last-epochs`` / ``--keep-interval-updates``
        and the worst ``checkpoint.best_*`` beyond ``--keep-best-checkpoints``."""
        keep_best = self.cfg.keep_best_checkpoints
        if keep_best > 0:
            for _, path in self._kept_best()[keep_best:]:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        for regex, keep, key in ((_UPDATES_RE, self.cfg.keep_interval_updates, lambda m: int(m.group(2))),
                                 (_EPOCH_RE, self.cfg.keep_last_epochs, lambda m: int(m.group(1)))):
            if keep is None or keep < 0:
                continue
            found = [(key(m), p) for p in self.save_dir.glob("checkpoint*.pt") if (m := regex.fullmatch(p.name))]
            for _, path in sorted(found, reverse=True)[keep:]:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def remove_temp_files(self) -> None:
        """Delete the temp files a killed save leaves behind (``.checkpoint*.tmp``); call before any save starts."""
        for path in self.save_dir.glob(".checkpoint*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # ----------------------------------------------------------------------- resuming

    def resume_path(self) -> Path | None:
        """The checkpoint to resume from: ``--restore-file`` (a bare name is looked up in save_dir first),
        or ``checkpoint_last.pt`` when it exists; None starts afresh."""
        restore = self.cfg.restore_file or LAST
        candidate = Path(restore).expanduser()
        if len(candidate.parts) == 1 and (self.save_dir / candidate).exists():
            return self.save_dir / candidate
        if candidate.exists():
            return candidate
        if restore == LAST:
            return None
        raise UsageError(f"--restore-file {restore}: no such checkpoint (looked in {self.save_dir} and the current "
                         "folder); give an existing checkpoint, or leave it out to resume from checkpoint_last.pt")

    def load_for_resume(self) -> dict[str, Any] | None:
        """The state to resume from (see :meth:`resume_path`), checked (format, plugins, dictionaries, a
        training state), or None for a fresh start. Removes a killed save's temp files first."""
        if self.writer:
            self.remove_temp_files()
        path = self.resume_path()
        if path is None:
            return None
        state = load_checkpoint(path)
        check_dictionaries(state, path, self.dictionaries)
        if not isinstance(state.get("training"), dict):
            raise CheckpointError(f"checkpoint {path} holds a model but no training state (an averaged or exported "
                                  "checkpoint?); resume from a checkpoint written by nmt-train")
        best = state["training"].get("best") or {}
        if best.get("metric") == self.metric:
            self.best = best.get("value")
        self.resumed_from = path
        return state

    def resume(self, parts: TrainingParts) -> dict[str, Any] | None:
        """Continue from ``--restore-file`` / ``checkpoint_last.pt`` into ``parts``, honouring --reset-optimizer /
        --reset-lr-scheduler / --reset-dataloader / --reset-meters (a reset part is not loaded: its entry comes
        back as None, or without the meters). Returns the stored ``training`` entry (epoch, num_updates,
        iterator, extra, best), or None for a fresh start. Call it once everything is built: building draws
        random numbers, and the RNGs are set last."""
        state = self.load_for_resume()
        if state is None:
            return None
        path = self.resumed_from
        cfg = self.cfg
        reset = {"optimizer": cfg.reset_optimizer, "lr_scheduler": cfg.reset_lr_scheduler,
                 "dataloader": cfg.reset_dataloader, "meters": cfg.reset_meters}
        model = getattr(parts.model, "module", parts.model)  # unwrap DistributedDataParallel
        mismatch = parameter_mismatch(model.state_dict(), state["model"])
        if mismatch:
            raise CheckpointError(f"checkpoint {path} holds another model than these options build: {mismatch}; "
                                  "use the model options of the run that wrote it, or start this model in another "
                                  "--save-dir (or from another --restore-file); the --reset-* options do not help "
                                  "here")
        training = dict(state["training"])
        self._check_training_parts(training, parts, reset, path)
        ema = training.get("ema")  # --ema-decay: "model" is the average, the trained weights are kept here
        model.load_state_dict(ema["raw_model"] if ema else state["model"])
        if parts.ema is not None:
            parts.ema.load(ema, state["model"] if ema else None)
        for name in ("optimizer", "lr_scheduler", "scaler", "iterator"):
            option = _RESETTABLE.get(name, (None,))[0]
            if option is not None and reset[option]:
                training[name] = None
            elif getattr(parts, name) is not None and training.get(name) is not None:
                self._load_part(getattr(parts, name), name, training[name], path)
        if reset["meters"]:
            training["extra"] = {k: v for k, v in (training.get("extra") or {}).items() if k not in _METER_KEYS}
        rng = self._rng_of_this_rank(training)
        if rng is not None:
            set_rng_state(rng)
        return training

    def _rng_of_this_rank(self, training: Mapping[str, Any]) -> Any:
        """This rank's stored random generators when several processes wrote the checkpoint (and it has
        one for this rank), else the writer's (older checkpoints, single-process runs)."""
        ranks = training.get("rng_ranks") or []
        return ranks[self.rank] if self.rank < len(ranks) else training.get("rng")

    @staticmethod
    def _check_training_parts(training: Mapping[str, Any], parts: TrainingParts, reset: Mapping[str, bool],
                              path: Any) -> None:
        """Refuse to resume silently without a part this run needs (averaged and imported checkpoints hold
        only the model): name what is missing and the --reset-* options that start from the weights alone."""
        missing = [name for name, (option, _) in _RESETTABLE.items()
                   if getattr(parts, name) is not None and training.get(name) is None and not reset[option]]
        if missing:
            what = ", ".join(_RESETTABLE[n][1] for n in missing)
            flags = " ".join(f"--reset-{_RESETTABLE[n][0].replace('_', '-')}" for n in missing)
            raise CheckpointError(f"checkpoint {path} holds no {what} state (an averaged or imported "
                                  "checkpoint, not one nmt-train wrote), so the run cannot continue where it was; "
                                  f"resume from a checkpoint nmt-train wrote, or add {flags} to start training "
                                  "from its weights")

    @staticmethod
    def _load_part(obj: Any, name: str, value: Any, path: Any) -> None:
        """``obj.load_state_dict(value)`` with a one-line error when the stored state is of another kind."""
        try:
            obj.load_state_dict(value)
        except (ValueError, KeyError, TypeError, RuntimeError) as e:
            first = (str(e).splitlines() or [type(e).__name__])[0][:160]
            option = _RESETTABLE.get(name, (None,))[0]
            fix = f"; use the options of the run that wrote it, or --reset-{option.replace('_', '-')}" if option else ""
            raise CheckpointError(f"checkpoint {path}: its {name} state does not fit this run's {name} "
                                  f"({first}){fix}") from None
