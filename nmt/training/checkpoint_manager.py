"""Which checkpoint files a run writes, which it keeps, which is best, and which it resumes from.

Names (fairseq's): ``checkpoint_last.pt`` on every save, ``checkpoint<epoch>.pt`` at the end of an
epoch, ``checkpoint_<epoch>_<updates>.pt`` every ``--save-interval-updates`` inside an epoch, and
``checkpoint_best.pt`` when the validation ``--best-checkpoint-metric`` improves. One save serialises
the state once; the other names are hard links to that file (see ``save_checkpoint``).
"""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from typing import Any, Mapping

from nmt.errors import ConfigError, UsageError
from nmt.training.checkpoints import (CheckpointError, check_dictionaries, load_checkpoint, restore_training_state,
                                      save_checkpoint)

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
_EPOCH_RE = re.compile(r"checkpoint(\d+)\.pt")
_UPDATES_RE = re.compile(r"checkpoint_(\d+)_(\d+)\.pt")


class CheckpointManager:
    """Saves, prunes and finds checkpoints in ``save_dir`` following the checkpoint options of ``cfg``.

    ``cfg`` is the trainer's checkpoint config (``save_dir``, ``restore_file``, ``save_interval_updates``,
    ``keep_last_epochs``, ``keep_interval_updates``, ``no_save``, ``best_checkpoint_metric``,
    ``maximize_best_checkpoint_metric``; ``save_interval``, ``no_epoch_checkpoints`` and
    ``no_last_checkpoints`` are honoured when present)."""

    def __init__(self, cfg: Any, save_dir: str | Path | None = None):
        self.cfg = cfg
        self.save_dir = Path(save_dir if save_dir is not None else getattr(cfg, "save_dir", "checkpoints"))
        self.metric: str = getattr(cfg, "best_checkpoint_metric", "loss") or "loss"
        self.maximize: bool = bool(getattr(cfg, "maximize_best_checkpoint_metric", False))
        self.best: float | None = None  # best validation value so far (restored on resume)

    def _opt(self, name: str, default: Any) -> Any:
        value = getattr(self.cfg, name, default)
        return default if value is None else value

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
              val_metrics: Mapping[str, float] | None = None) -> list[str]:
        """The file names a save at this point writes (empty: nothing to save). Does not change ``best``."""
        if self._opt("no_save", False):
            return []
        names = []
        if end_of_epoch:
            if not self._opt("no_epoch_checkpoints", False) and epoch % max(1, self._opt("save_interval", 1)) == 0:
                names.append(f"checkpoint{epoch}.pt")
        else:
            every = self._opt("save_interval_updates", 0)
            if every > 0 and num_updates % every == 0:
                names.append(f"checkpoint_{epoch}_{num_updates}.pt")
        value = self.metric_value(val_metrics)
        if self.is_better(value):
            names.append(BEST)
        if value is not None and self._in_top_best(value):
            names.append(f"checkpoint.best_{self.metric}_{value:.4f}.pt")
        if (names or end_of_epoch) and not self._opt("no_last_checkpoints", False):
            names.append(LAST)
        return names

    def wants_save(self, epoch: int, num_updates: int, end_of_epoch: bool,
                   val_metrics: Mapping[str, float] | None = None) -> bool:
        """Whether :meth:`save` would write anything now (so the state need not be built otherwise)."""
        return bool(self.names(epoch, num_updates, end_of_epoch, val_metrics))

    def save(self, state: dict[str, Any], val_metrics: Mapping[str, float] | None = None) -> list[Path]:
        """Write ``state`` (from ``build_state``) under every name due now, then prune old ones. Rank 0 only.

        The best value so far is stored in the state, so a resumed run keeps comparing against it."""
        training = state["training"]
        epoch, num_updates = training["epoch"], training["num_updates"]
        names = self.names(epoch, num_updates, training.get("end_of_epoch", False), val_metrics)
        if not names:
            return []
        value = self.metric_value(val_metrics)
        if self.is_better(value):
            self.best = value
        training["best"] = {"metric": self.metric, "value": self.best}
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
        keep = self._opt("keep_best_checkpoints", -1)
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
        keep_best = self._opt("keep_best_checkpoints", -1)
        if keep_best > 0:
            for _, path in self._kept_best()[keep_best:]:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        for regex, keep, key in ((_UPDATES_RE, self._opt("keep_interval_updates", -1), lambda m: int(m.group(2))),
                                 (_EPOCH_RE, self._opt("keep_last_epochs", -1), lambda m: int(m.group(1)))):
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
        restore = self._opt("restore_file", LAST) or LAST
        candidate = Path(restore).expanduser()
        if len(candidate.parts) == 1 and (self.save_dir / candidate).exists():
            return self.save_dir / candidate
        if candidate.exists():
            return candidate
        if restore == LAST:
            return None
        raise UsageError(f"--restore-file {restore}: no such checkpoint (looked in {self.save_dir} and the current "
                         "folder); give an existing checkpoint, or leave it out to resume from checkpoint_last.pt")

    def restore(self, state: Mapping[str, Any], *, model: Any, optimizer: Any = None, lr_scheduler: Any = None,
                scaler: Any = None) -> dict[str, Any]:
        """``restore_training_state`` honouring --reset-optimizer / --reset-lr-scheduler / --reset-dataloader /
        --reset-meters: a reset part is not loaded (its ``training`` entry comes back as None / empty)."""
        reset = {name: bool(self._opt(f"reset_{name}", False)) for name in ("optimizer", "lr_scheduler", "dataloader",
                                                                             "meters")}
        training = dict(restore_training_state(
            state, model=model, optimizer=None if reset["optimizer"] else optimizer,
            lr_scheduler=None if reset["lr_scheduler"] else lr_scheduler, scaler=scaler))
        if reset["dataloader"]:
            training["iterator"] = None
        if reset["meters"]:
            training["extra"] = {k: v for k, v in (training.get("extra") or {}).items() if k != "meters"}
        return training

    def load_for_resume(self, dictionaries: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The state to resume from (see :meth:`resume_path`), checked (format, plugins, dictionaries), or None.

        Apply it with ``restore_training_state`` once the model, optimizer, scheduler and scaler exist."""
        self.remove_temp_files()
        path = self.resume_path()
        if path is None:
            return None
        state = load_checkpoint(path)
        if dictionaries:
            check_dictionaries(state, path, dictionaries)
        if not isinstance(state.get("training"), dict):
            raise CheckpointError(f"checkpoint {path} holds a model but no training state (an averaged or exported "
                                  "checkpoint?); resume from a checkpoint written by nmt-train")
        best = state["training"].get("best") or {}
        if best.get("metric") == self.metric:
            self.best = best.get("value")
        return state
