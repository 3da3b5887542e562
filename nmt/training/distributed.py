"""Several training processes: who we are, how we meet, and how gradients are shared.

Under ``torchrun`` (one node or many) the standard variables RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT say everything. Without them,
``--distributed-world-size N`` spawns N local workers that meet on a free localhost port.
Backend: nccl on GPU, gloo on CPU. Only rank 0 writes files and logs.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable, ContextManager, Iterable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nmt.config.train import DistributedTrainingConfig, TrainJob
from nmt.errors import ConfigError, NmtError
from nmt.hardware import cores_per_process
from nmt.training import preemption


@dataclass(frozen=True)
class DistributedContext:
    """This process's place among the workers."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_master(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def needs_spawn(cfg: DistributedTrainingConfig) -> bool:
    """True when this process must start the workers itself (N > 1 and no torchrun around it)."""
    return cfg.distributed_world_size > 1 and not under_torchrun() and cfg.distributed_init_method is None


def pick_device(cfg: DistributedTrainingConfig, local_rank: int) -> torch.device:
    if cfg.cpu or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank if under_torchrun() else cfg.device_id + local_rank)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker: Callable[[TrainJob], object], cfg: TrainJob) -> None:
    """Run ``worker(cfg)`` in ``--distributed-world-size`` local processes (rank i gets
    ``cfg.distributed_training.distributed_rank = i``); SIGTERM/SIGUSR1 sent to this process are passed on to them."""
    dcfg: DistributedTrainingConfig = cfg.distributed_training
    port = dcfg.distributed_port if dcfg.distributed_port > 0 else free_port()
    cfg.distributed_training = replace(dcfg, distributed_init_method=f"tcp://127.0.0.1:{port}")
    try:
        workers = torch.multiprocessing.spawn(_spawned, args=(worker, cfg), nprocs=dcfg.distributed_world_size,
                                              join=False)
        with preemption.forwarded_to(lambda: [p.pid for p in workers.processes if p.pid is not None]):
            while not workers.join():  # a preemption signal sent only to this launcher reaches the workers
                pass
    except torch.multiprocessing.ProcessExitedException as e:
        raise NmtError(f"distributed worker {e.error_index} stopped with exit code {e.exit_code} "
                       "(its error is printed above)") from None


def _spawned(index: int, worker: Callable[[TrainJob], object], cfg: TrainJob) -> None:
    cfg.distributed_training = replace(cfg.distributed_training, distributed_rank=index)
    try:
        worker(cfg)
    except NmtError as e:  # one line, like the single-process command, then a clean exit code
        print(f"nmt-train: error (rank {index}): {e}", file=sys.stderr, flush=True)
        sys.exit(e.exit_code)


def set_threads(cfg: DistributedTrainingConfig, local_world_size: int) -> None:
    """One intra-op thread pool per process, sized so the local processes share the cores."""
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
        return
    torch.set_num_threads(cores_per_process(local_world_size))


def init(cfg: DistributedTrainingConfig) -> DistributedContext:
    """Join the process group (when there is more than one process) and return our place in it."""
    init_method: str | None
    if under_torchrun():
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        init_method = "env://"
    else:
        rank, world = cfg.distributed_rank, cfg.distributed_world_size
        local_rank, local_world = rank, world
        init_method = cfg.distributed_init_method
    if world > 1 and init_method is None:
        raise ConfigError("--distributed-world-size > 1 needs torchrun, --distributed-init-method tcp://HOST:PORT, "
                          "or to be run without either so that nmt-train spawns the workers")
    device = pick_device(cfg, local_rank)
    set_threads(cfg, local_world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        backend = cfg.distributed_backend or ("nccl" if device.type == "cuda" else "gloo")
        if backend == "nccl" and device.type != "cuda":
            raise ConfigError("--distributed-backend nccl needs CUDA; use gloo on the CPU")
        timeout = datetime.timedelta(seconds=cfg.ddp_timeout)
        if under_torchrun() and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            dist.init_process_group(backend, store=attempt_store(rank, world, timeout), rank=rank, world_size=world,
                                    timeout=timeout)
        else:
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=timeout)
    return DistributedContext(rank, world, local_rank, local_world, device)


def attempt_store(rank: int, world: int, timeout: datetime.timedelta) -> dist.Store:
    """torchrun's agent store seen under a prefix of this attempt (``TORCHELASTIC_RESTART_COUNT``).

    The agent keeps one store for all the worker groups it starts, so after an elastic restart the
    new workers would find the dead ones' gloo/nccl addresses in it and wait forever to connect to
    them (pytorch/pytorch#135712). The restart count is the same for every worker of one agent; with
    several agents it may differ, hence TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in docs/multi-gpu.md."""
    from torch.distributed.rendezvous import rendezvous

    store, _, _ = next(rendezvous("env://", rank, world, timeout=timeout))
    return dist.PrefixStore(f"nmt/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


_COLLECTIVE_FAILURES = ("gloo", "nccl", "timed out", "connection closed", "connection reset", "broken pipe")


def collective_failure(error: BaseException, ctx: DistributedContext, timeout: int, hint: str) -> NmtError | None:
    """The one-line error for a collective that failed because another rank died or stalled
    (None when ``error`` is something else, which must keep its traceback)."""
    text = str(error)
    is_dist_error = isinstance(error, getattr(dist, "DistError", ()))
    if not ctx.is_distributed or not (is_dist_error or any(k in text.lower() for k in _COLLECTIVE_FAILURES)):
        return None
    first = (text.strip().splitlines() or [type(error).__name__])[0]
    first = first.split("] ", 1)[-1].split(". ")[0][:160]  # drop gloo's "[.../pair.cc:537] " and its advice
    return NmtError(f"rank {ctx.rank}: a collective with the other workers failed ({first}); another worker died "
                    f"or stalled longer than --ddp-timeout {timeout} s. Check the other workers' logs, then run "
                    f"again to resume ({hint})")


def shutdown(finished: bool) -> None:
    """Leave the process group. After a run that ``finished`` (on every rank: they stop at the same update), the
    ranks first wait for each other, so none tears its connections down while rank 0 still writes checkpoints.
    Once in CI a gloo worker that had left during those writes aborted at exit ("terminate called without an
    active exception", exit code -6, tests/test_train_distributed.py); the cause is not pinned down (30 runs did
    not repeat it), and the wait costs nothing."""
    if dist.is_available() and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


class ModelWrapper(DistributedDataParallel):
    """DistributedDataParallel that still answers the wrapped model's attributes
    (``model.decoder``, ``model.encoder``), so criteria need not know about DDP."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":  # not set yet (inside DDP's own __init__)
                raise
            return getattr(self.module, name)


def wrap_model(model: torch.nn.Module, cfg: DistributedTrainingConfig, ctx: DistributedContext) -> torch.nn.Module:
    """The module the forward pass goes through: DDP for pytorch_ddp, the model itself otherwise."""
    if not ctx.is_distributed or cfg.ddp_backend == "legacy_ddp":
        return model
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return ModelWrapper(model, device_ids=device_ids, bucket_cap_mb=cfg.bucket_cap_mb,
                        find_unused_parameters=cfg.find_unused_parameters, forward_sync_buffers=False)


def no_sync(wrapped: torch.nn.Module, last: bool) -> ContextManager:
    """Skip DDP's gradient all-reduce on all but the last batch of an accumulated update."""
    if isinstance(wrapped, DistributedDataParallel) and not last:
        return wrapped.no_sync()
    return contextlib.nullcontext()


def grads_are_averaged(wrapped: torch.nn.Module) -> bool:
    """DDP averages gradients over ranks; legacy_ddp (below) sums them."""
    return isinstance(wrapped, DistributedDataParallel)


def all_reduce_grads(params: Iterable[torch.nn.Parameter]) -> None:
    """legacy_ddp: sum every gradient over the ranks with one flat all-reduce."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])  # (total params,)
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def all_gather_object(value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable, small), in rank order; ``[value]`` with one process."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a small stats vector over the ranks (identity with one process)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(values)
    return values

