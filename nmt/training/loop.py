"""The training run: epochs of updates, validation, checkpoints, and the reasons to stop.

Stopping: --max-epoch, --max-update, --stop-time-hours (training time, summed over resumes, without the time
spent validating and writing checkpoints: ``nmt.training.budget.TrainingClock``), and --patience (validations
in a row without a better --best-checkpoint-metric). Validation runs at the end of every --validate-interval
epochs and every --validate-interval-updates. --save-at-progress saves checkpoints at shares of the budget.
SIGTERM/SIGUSR1 (preemption, see ``nmt.training.preemption``) stops every rank after the same
update, with only the validation that was due anyway, and saves checkpoint_last.pt: resuming it
continues exactly as if the run had never stopped.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
import time
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from nmt.checkpoint.manager import CheckpointManager, TrainingParts
from nmt.checkpoint.rng_state import get_rng_state
from nmt.checkpoint.save_dir import hold_save_dir
from nmt.config.loader import save_config
from nmt.config.train import TrainJob
from nmt.cpu_speed import process_settings
from nmt.errors import NmtError
from nmt.fileio import DiskFullError
from nmt.plugin_loader import load_plugins
from nmt.training import distributed, preemption
from nmt.training.budget import TrainingClock, check_budget
from nmt.training.distributed import DistributedContext
from nmt.training.dropout_schedule import check_dropout_schedule, check_model_has_dropout, dropout_at, set_dropout
from nmt.training.job_setup import TrainData, build_model_and_criterion, load_data, train_iterator, valid_iterator
from nmt.training.metrics import UpdateMeter, ValidMeter
from nmt.training.precision import TrainingDiverged
from nmt.training.preemption import StopRequest
from nmt.training.train_log import TrainLog, setup_console_logging
from nmt.training.trainer import Trainer
from nmt.training.validation_bleu import ValidationBleu


def chunks(iterator: Iterator[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of ``size`` items (the last may be shorter): one update's batches."""
    while True:
        chunk = list(islice(iterator, size))
        if not chunk:
            return
        yield chunk


def _every(n: int, interval: int) -> bool:
    return interval > 0 and n % interval == 0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class TrainingRun:
    """One call of nmt-train in one process (rank)."""

    def __init__(self, cfg: TrainJob, ctx: DistributedContext, stop: StopRequest | None = None):
        self.cfg = cfg
        self.ctx = ctx
        setup_console_logging(ctx.is_master)
        seed_everything(cfg.common.seed)
        self.log = TrainLog(cfg.logging, cfg.checkpoint.save_dir, ctx.is_master, cfg.common.no_progress_bar)
        self.data: TrainData = load_data(cfg.task)
        model, criterion = build_model_and_criterion(cfg, self.data)
        self.trainer = Trainer(cfg, model, criterion, ctx)
        self.stop = stop or StopRequest()  # none given: this run is never asked to stop
        self.trainer.stop_requested = self.stop.requested
        self.trainer.time_is_up = self._clock_says_stop
        self.clock = TrainingClock()  # restarted when the run starts, from the time trained before (train_time)
        self.trainer.training_seconds = self.elapsed
        self.save_points = check_budget(cfg)  # --save-at-progress: shares of the budget to save a checkpoint at
        check_dropout_schedule(cfg.model)
        check_model_has_dropout(model, cfg.model)
        self.dropout = float(cfg.model.dropout)  # the --dropout modules' rate (--dropout-final: set per epoch)
        self.points_passed = 0.0  # the progress up to which they are saved (or were, before a resume)
        self.points_due: list[float] = []  # reached, to be saved with the next checkpoint
        self.bleu = ValidationBleu.create(cfg, self.data.src_dict, self.data.tgt_dict, ctx, self.log.info)
        self.train_itr = train_iterator(cfg, self.data, ctx)
        self.manager = CheckpointManager(cfg.checkpoint, config=cfg, writer=ctx.is_master, rank=ctx.rank,
                                         dictionaries={"source": self.data.src_dict, "target": self.data.tgt_dict})
        self.train_time = 0.0  # seconds of training before this process (restored on resume)
        self.time_up = False  # --stop-time-hours reached: agreed by every rank (see _stop_reason)
        self.bad_validations = 0  # validations in a row without a better best metric
        self.last_good: Path | None = None  # the newest checkpoint this run wrote or resumed from
        self.last_written: list[Path] = []  # the files of the newest save (empty: it had nothing to write)
        self.stopped_by: str | None = None  # the signal that stopped the run (None: it was not preempted)
        # The current epoch's figures (and those since the last log line); a mid-epoch checkpoint keeps them.
        self.epoch_meter, self.interval_meter = UpdateMeter(criterion), UpdateMeter(criterion)
        nparams = sum(p.numel() for p in model.parameters())
        self.log.info(f"model {cfg.model.arch['name']}: {nparams:,} parameters; criterion {cfg.criterion['name']}; "
                      f"{self.trainer.precision.name} on {ctx.device} x {ctx.world_size}; "
                      f"{len(self.train_itr)} batches per epoch per rank; update freq {cfg.optimization.update_freq}")
        self._restore()
        if ctx.is_master:  # after the resume checks: a refused run leaves the previous run's config.yaml
            save_config(cfg, Path(cfg.checkpoint.save_dir) / "config.yaml")  # the save dir exists: it is locked

    # ------------------------------------------------------------------ resume / save

    def parts(self) -> TrainingParts:
        """The live objects a checkpoint saves and a resume restores."""
        t = self.trainer
        return TrainingParts(model=t.model, optimizer=t.optimizer, lr_scheduler=t.lr_scheduler, scaler=t.precision,
                             iterator=self.train_itr, ema=t.ema)

    def _restore(self) -> None:
        training = self.manager.resume(self.parts())
        self._check_same_start(training)
        if training is None:
            return
        t = self.trainer
        t.num_updates = int(training["num_updates"])
        extra = training.get("extra") or {}
        self.train_time = float(extra.get("train_time", 0.0))  # without it under --reset-meters
        # the progress the schedule read when the checkpoint was taken; else (a checkpoint from before schedules
        # followed the budget, --reset-lr-scheduler) the budget's share the checkpoint's figures say
        stored = (training.get("lr_scheduler") or {}).get("progress")
        t.progress = float(stored) if stored is not None else t.budget.progress(t.num_updates, self.train_time)
        t.lr_scheduler.step_update(t.num_updates, t.progress)
        self.points_passed = t.progress
        limit = self.cfg.optimization.stop_time_hours * 3600
        self.time_up = 0 < limit <= self.train_time  # the same checkpoint, so the same answer on every rank
        self.bad_validations = int(extra.get("bad_validations", 0))
        meters = extra.get("meters")  # absent: an older checkpoint, or --reset-meters
        if meters and not self.train_itr.end_of_epoch():
            self.epoch_meter.load_state_dict(meters["epoch"])
            self.interval_meter.load_state_dict(meters["interval"])
        self.last_good = self.manager.resumed_from
        self.log.info(f"resumed from {self.last_good} at epoch {training['epoch']}, "
                      f"update {t.num_updates}")

    def _check_same_start(self, training: dict[str, Any] | None) -> None:
        """Refuse ranks that resumed from different points: on several machines without a shared --save-dir,
        rank 0 would continue from its checkpoint while the others start afresh, and the replicas part ways."""
        if not self.ctx.is_distributed:
            return
        starts = distributed.all_gather_object(None if training is None else int(training["num_updates"]))
        if len(set(starts)) > 1:
            found = ", ".join(f"rank {r} {'at update ' + str(s) if s is not None else 'found none'}"
                              for r, s in enumerate(starts))
            raise NmtError(f"--save-dir {self.cfg.checkpoint.save_dir}: the ranks resume from different checkpoints "
                           f"({found}); give every node the same --save-dir on a shared filesystem (or the same "
                           "--restore-file)")

    def last_good_hint(self) -> str:
        """Where to resume from after a failure, for its one-line message."""
        if self.last_good is not None:
            return f"the last good checkpoint is {self.last_good}"
        if not self.ctx.is_master:
            return "rank 0 names the last good checkpoint"
        return "no checkpoint was saved before it"

    def elapsed(self) -> float:
        """Seconds of training so far, earlier runs of this training included (the clock of --stop-time-hours)."""
        return self.clock.seconds()

    def save(self, end_of_epoch: bool, val_metrics: dict[str, float] | None, force_last: bool = False) -> None:
        """Whatever checkpoints are due (and checkpoint_last when stopping); rank 0 writes them, with every
        rank's random generators (gathered on every call, by every rank, whether or not a file is due).
        Not training time (the clock is paused)."""
        epoch, n = self.train_itr.epoch, self.trainer.num_updates
        meters = {"epoch": self.epoch_meter.state_dict(), "interval": self.interval_meter.state_dict()}
        points, self.points_due = self.points_due, []
        with self.clock.paused():
            rng_ranks = distributed.all_gather_object(get_rng_state()) if self.ctx.is_distributed else None
            extra = {"train_time": self.elapsed(), "bad_validations": self.bad_validations, "meters": meters}
            try:
                written = self.manager.save(self.parts(), epoch=epoch, num_updates=n, end_of_epoch=end_of_epoch,
                                            val_metrics=val_metrics, force_last=force_last, rng_ranks=rng_ranks,
                                            progress_points=points, extra=extra)
            except DiskFullError as e:
                raise NmtError(f"update {n}: {e}; training stopped, {self.last_good_hint()}") from e
        self.last_written = written
        if written:
            self.last_good = written[0]
            self.log.info(f"saved {', '.join(p.name for p in written)} (epoch {epoch}, {n} updates)")

    # ------------------------------------------------------------------ validation

    def validate(self) -> dict[str, float] | None:
        """Loss on every validation subset, of the weight average with --ema-decay; returns the first subset's
        figures (None when disabled). Not training time (the clock is paused)."""
        ema = self.trainer.ema
        with self.clock.paused(), ema.swapped_in() if ema is not None else contextlib.nullcontext():
            return self._validate()

    def _validate(self) -> dict[str, float] | None:
        first = None
        epoch = self.train_itr.epoch
        for subset, dataset in self.data.valid.items():
            itr = valid_iterator(self.cfg, subset, dataset, self.ctx)
            meter = ValidMeter(self.trainer.criterion)
            for sample in itr.next_epoch_itr():  # this rank's share, possibly none
                meter.add(self.trainer.valid_step(sample))
            meter.set_totals(self.trainer.all_reduce(meter.totals()))  # every rank: one all-reduce
            stats = meter.summary(self.trainer.num_updates)
            if self.bleu is not None:  # --eval-bleu: bleu and chrf of the subset's translation
                stats.update(self.bleu.scores(self.trainer.model, subset, dataset))
            if first is None:
                value = self.manager.metric_value(stats)
                best = value if self.manager.is_better(value) else self.manager.best
                stats["best_" + self.manager.metric] = best
                first = stats
            self.log.emit("valid", epoch, stats, subset=subset)
        return first

    def _track_patience(self, val_metrics: dict[str, float] | None) -> bool:
        """True when --patience validations in a row brought no improvement."""
        if val_metrics is None:
            return False
        if self.manager.is_better(self.manager.metric_value(val_metrics)):
            self.bad_validations = 0
        else:
            self.bad_validations += 1
        patience = self.cfg.checkpoint.patience
        if 0 < patience <= self.bad_validations:
            self.log.info(f"early stop: {self.manager.metric} has not improved for {patience} validations")
            return True
        return False

    # ------------------------------------------------------------------ the loop

    def _clock_says_stop(self) -> bool:
        """This rank's vote on --stop-time-hours, cast in every update's all-reduce (Trainer.time_is_up)."""
        opt = self.cfg.optimization
        return opt.stop_time_hours > 0 and self.elapsed() >= opt.stop_time_hours * 3600

    def _stop_reason(self) -> str | None:
        """Why to stop now, decided alike on every rank: the update count is the same everywhere, and the time
        limit counts once some rank's clock has voted for it in an update (a rank that read its own clock at
        an epoch's end could stop while another waits for it in the next update's all-reduce)."""
        opt = self.cfg.optimization
        if opt.max_update > 0 and self.trainer.num_updates >= opt.max_update:
            return f"reached --max-update {opt.max_update}"
        if self.time_up:
            return f"reached --stop-time-hours {opt.stop_time_hours}"
        return None

    def _note_progress_points(self) -> bool:
        """Queue the --save-at-progress points the last update reached (all that are left when the budget has
        run out: the run stops at this update); True when some are waiting to be saved."""
        t, opt = self.trainer, self.cfg.optimization
        budget_spent = self.time_up or 0 < opt.max_update <= t.num_updates
        now = 1.0 if budget_spent else t.progress
        self.points_due += [p for p in self.save_points if self.points_passed < p <= now]
        self.points_passed = max(self.points_passed, now)
        return bool(self.points_due)

    def _preempted(self, requested: bool) -> str | None:
        """The stop reason when some rank was sent a preemption signal (and nothing else ended the run)."""
        if not requested:
            return None
        self.stopped_by = self.stop.name() or "a preemption signal sent to another rank"
        return f"stopped by {self.stopped_by}"

    def run(self) -> dict[str, Any]:
        """Train until a stop condition; returns the last epoch's train and valid figures."""
        max_epoch = self.cfg.optimization.max_epoch
        summary: dict[str, Any] = {}
        self.clock = TrainingClock(self.train_time)
        reason = self._stop_reason()
        while reason is None:
            if 0 < max_epoch <= self.train_itr.epoch and self.train_itr.end_of_epoch():
                reason = f"reached --max-epoch {max_epoch}"
                break
            try:
                reason, summary = self._train_epoch()
            except TrainingDiverged as e:  # in an update or a validation: name where to resume from
                raise TrainingDiverged(f"{e}; {self.last_good_hint()}") from e
        self.log.info(f"done training: {reason}; {self.trainer.num_updates} updates in {self.elapsed():.1f} s of "
                      "training")
        self.log.close()
        return summary

    def _set_dropout(self, epoch: int) -> None:
        """--dropout-final: this epoch's rate (a function of its number, so a resumed epoch has it too)."""
        rate = dropout_at(self.cfg.model, epoch)
        if rate != self.dropout:
            set_dropout(self.trainer.model, rate)
            self.dropout = rate
            self.log.info(f"epoch {epoch:03d}: dropout {rate:.4g} (--dropout-final)")

    def _train_epoch(self) -> tuple[str | None, dict[str, Any]]:
        """The rest of the current epoch (or the next one): (why to stop or None, the epoch's figures)."""
        cfg, t = self.cfg, self.trainer
        task, opt = cfg.task, cfg.optimization
        batches = self.train_itr.next_epoch_itr()
        epoch = self.train_itr.epoch
        self._set_dropout(epoch)
        total = -(-len(self.train_itr) // opt.update_freq)  # updates in a whole epoch
        done = self.train_itr.offset // opt.update_freq
        if done == 0:  # a new epoch (a resumed one keeps the figures of its first part)
            self.epoch_meter.reset()
            self.interval_meter.reset()
        epoch_meter, interval = self.epoch_meter, self.interval_meter
        reason = None
        preempt = False  # some rank was signalled: stop after this update, saving it
        tick = time.perf_counter()
        for samples in self.log.bar(chunks(batches, opt.update_freq), epoch, total, done):
            stats = t.train_step(samples)
            self.time_up = self.time_up or stats["time_up"]
            if not stats["applied"]:
                self.log.info(f"update {t.num_updates + 1}: fp16 gradient overflow, update skipped; "
                              f"loss scale now {t.precision.loss_scale:g}")
            now = time.perf_counter()
            epoch_meter.add(stats, now - tick)
            interval.add(stats, now - tick)
            done += 1
            n = t.num_updates
            if stats["applied"] and _every(n, cfg.logging.log_interval):
                self.log.emit("train_inner", epoch, interval.summary(n, self.log.wall()), f"{done:>6} / {total}")
                interval.reset()
            reason = self._stop_reason()
            preempt = stats["stop_requested"]
            valid_due = stats["applied"] and _every(n, task.validate_interval_updates)
            save_due = stats["applied"] and _every(n, cfg.checkpoint.save_interval_updates)
            save_due = self._note_progress_points() or save_due
            if not self.train_itr.end_of_epoch() and (reason or preempt or valid_due or save_due):
                # Preemption validates only when due anyway: the resumed run then logs what an uninterrupted one does.
                val_metrics = self.validate() if (reason or valid_due) else None
                if self._track_patience(val_metrics):
                    reason = reason or "patience"
                self.save(False, val_metrics, force_last=reason is not None or preempt)
            if reason or preempt:
                break
            tick = time.perf_counter()  # validation and saving are not training time
        if not self.train_itr.end_of_epoch():
            return reason or self._preempted(preempt), {}  # stopped inside the epoch (already saved)

        summary: dict[str, Any] = {"train": epoch_meter.summary(t.num_updates, self.log.wall())}
        self.log.emit("train", epoch, summary["train"])
        val_metrics = None
        if not task.disable_validation and epoch % task.validate_interval == 0:
            val_metrics = summary["valid"] = self.validate()
            if self._track_patience(val_metrics):
                reason = reason or "patience"
        t.lr_scheduler.step_epoch(epoch, (val_metrics or {}).get("loss"))
        self.save(True, val_metrics, force_last=True)
        if 0 < opt.max_epoch <= epoch:
            reason = reason or f"reached --max-epoch {opt.max_epoch}"
        return reason or self._stop_reason() or self._preempted(preempt), summary


def train_worker(cfg: TrainJob, save_dir_held: bool = False) -> dict[str, Any]:
    """Train in this process (one rank); joins/leaves the process group around it. Rank 0 holds the
    --save-dir lock for the run unless the launcher that spawned it (``save_dir_held``) already does."""
    with preemption.stop_requests() as stop:  # first: a signal while starting up stops after update 1
        load_plugins(cfg.common.user_dir)  # a spawned worker starts with empty registries
        process_settings()  # every update frees and re-allocates the same large activations (nmt.cpu_speed)
        ctx = distributed.init(cfg.distributed_training)
        run = None
        finished = False
        try:
            with contextlib.ExitStack() as stack:
                if ctx.is_master and not save_dir_held:
                    stack.enter_context(hold_save_dir(cfg.checkpoint.save_dir))
                run = TrainingRun(cfg, ctx, stop)
                summary = run.run()
            finished = True
        except RuntimeError as e:  # another rank died or stalled: say so in one line instead of gloo's trace
            hint = run.last_good_hint() if run is not None else "no checkpoint was saved by this run"
            failure = distributed.collective_failure(e, ctx, cfg.distributed_training.ddp_timeout, hint)
            if failure is None:
                raise
            raise failure from e
        finally:
            distributed.shutdown(finished)
        # After the save dir's lock and the process group are released: the job may be requeued now.
        if run is not None and run.stopped_by is not None and ctx.is_master:
            line = preemption.stop_line(run.stopped_by, run.trainer.num_updates, run.last_written,
                                        cfg.checkpoint.requeue_on_preemption, run.last_good_hint())
            print(line, file=sys.stderr, flush=True)
        return summary


def train(cfg: TrainJob) -> dict[str, Any] | None:
    """Train with the processes the config asks for: spawn local workers (holding the --save-dir lock
    for them all), or be one rank."""
    if distributed.needs_spawn(cfg.distributed_training):
        with hold_save_dir(cfg.checkpoint.save_dir):
            distributed.spawn(functools.partial(train_worker, save_dir_held=True), cfg)
        return None
    return train_worker(cfg)
