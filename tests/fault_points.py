"""`nmt-train` with one fault planted at a chosen update, for the reliability tests.

Run as ``python tests/fault_points.py DATA [nmt-train options]`` (or under torchrun): it installs
the fault named by ``NMT_TEST_FAULT`` and then calls the real ``nmt.cli.train.main``. Nothing in
nmt itself knows about faults; the hooks wrap the trainer and the checkpoint writer from outside.

``NMT_TEST_FAULT`` is ``KIND:UPDATE`` or ``KIND:UPDATE:RANK`` (the fault fires only on that rank), or
several of them joined by commas:

- ``block-update``   stop inside update UPDATE: gradients computed, optimizer not stepped yet
- ``block-valid``    stop inside the validation after update UPDATE (one batch done)
- ``block-write``    stop halfway through writing the checkpoint of update UPDATE (temp file half full)
- ``block-link``     stop after that checkpoint's first file is renamed, before its other names are linked
- ``disk-full``      the checkpoint write of update UPDATE fails with ENOSPC after 4 KB
- ``nan-loss``       the loss of update UPDATE is NaN
- ``inf-grad``       a gradient of update UPDATE is inf (an fp16 overflow)
- ``exit``           the process dies (``os._exit(3)``) at the start of update UPDATE
- ``stall``          the process hangs at the start of update UPDATE
- ``signal-update``  the process sends itself SIGTERM inside update UPDATE (its batches drawn, not yet run)
- ``signal-valid``   ... inside the validation after update UPDATE (one batch done), then validation goes on
- ``signal-write``   ... while the checkpoint of update UPDATE is being written, then the write goes on

A ``block-*`` or ``stall`` fault writes the file ``NMT_TEST_FAULT_MARKER`` (when set) and then
sleeps: the test sees the marker and SIGKILLs the process while it is inside that phase.

Under torchrun the fault is planted in the first attempt only (``TORCHELASTIC_RESTART_COUNT`` 0), so
the worker group torchrun restarts after the kill runs without it.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys
import time
from pathlib import Path

FP16_ON_CPU_ENV = "NMT_TEST_FP16_ON_CPU"
FAULT_ENV = "NMT_TEST_FAULT"
MARKER_ENV = "NMT_TEST_FAULT_MARKER"


def _parse(spec: str) -> tuple[str, int, int | None]:
    parts = spec.split(":")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else None


def _hold() -> None:
    """Announce that the fault point is reached, then wait to be killed."""
    marker = os.environ.get(MARKER_ENV)
    if marker:
        Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(1)


class _FullDisk:
    """A file whose writes fail with ENOSPC once ``limit`` bytes are written (all else is the real file's)."""

    def __init__(self, f, limit: int):
        self.f, self.limit, self.written = f, limit, 0

    def __getattr__(self, name: str):
        return getattr(self.f, name)

    def write(self, data) -> int:
        if self.written + len(data) > self.limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return self.f.write(data)


def install(spec: str) -> None:
    """Plant the fault ``spec`` (see the module docstring) in this process."""
    import torch

    from nmt.checkpoint import format as checkpoint_format
    from nmt.training import trainer

    kind, update, rank = _parse(spec)
    saving = {"update": None}  # the update number of the checkpoint being written
    fired = []  # a fault fires once (a skipped fp16 update is retried with the same number)
    signalled = []  # the same for a signal in validation (which runs after the update's train step)

    def here(t) -> bool:
        return rank is None or t.ctx.rank == rank

    train_step = trainer.Trainer.train_step

    def train_step_with_fault(self, samples):
        if self.num_updates + 1 == update and here(self) and not fired:
            fired.append(kind)
            if kind == "exit":
                os._exit(3)
            if kind == "stall":
                _hold()
            if kind == "signal-update":
                os.kill(os.getpid(), signal.SIGTERM)
            if kind == "nan-loss":
                hook = self.criterion.register_forward_hook(
                    lambda m, inp, out: (out[0] * float("nan"), out[1], {**out[2], "loss": float("nan")}))
                try:
                    return train_step(self, samples)
                finally:
                    hook.remove()
            if kind == "inf-grad":
                hook = self.params[0].register_hook(lambda g: torch.full_like(g, float("inf")))
                try:
                    return train_step(self, samples)
                finally:
                    hook.remove()
        return train_step(self, samples)

    step = trainer.Trainer._step

    def step_with_fault(self, totals, *rest):
        if kind == "block-update" and self.num_updates + 1 == update and here(self):
            _hold()
        return step(self, totals, *rest)

    valid_step = trainer.Trainer.valid_step

    def valid_step_with_fault(self, sample):
        out = valid_step(self, sample)
        if kind == "block-valid" and self.num_updates == update and here(self):
            _hold()
        if kind == "signal-valid" and self.num_updates == update and here(self) and not signalled:
            signalled.append(kind)
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    real_save = torch.save

    def save_with_fault(obj, f, *args, **kwargs):
        training = obj.get("training") if isinstance(obj, dict) else None
        saving["update"] = training.get("num_updates") if isinstance(training, dict) else None
        if saving["update"] != update:
            return real_save(obj, f, *args, **kwargs)
        if kind == "disk-full":
            return real_save(obj, _FullDisk(f, 4096), *args, **kwargs)
        if kind == "signal-write":
            os.kill(os.getpid(), signal.SIGTERM)
        if kind == "block-write":
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            _hold()
        return real_save(obj, f, *args, **kwargs)

    link = checkpoint_format._link_into_place

    def link_with_fault(src, dst):
        if kind == "block-link" and saving["update"] == update:
            _hold()
        return link(src, dst)

    trainer.Trainer.train_step = train_step_with_fault
    trainer.Trainer._step = step_with_fault
    trainer.Trainer.valid_step = valid_step_with_fault
    checkpoint_format.torch.save = save_with_fault
    checkpoint_format._link_into_place = link_with_fault


def main() -> None:
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"  # a restarted group runs clean
    for spec in filter(None, os.environ.get(FAULT_ENV, "").split(",") if first_attempt else []):
        install(spec)
    if os.environ.get(FP16_ON_CPU_ENV):  # run --fp16's loss scaler on the CPU (the model stays fp32)
        from nmt.training import precision

        precision.fp16_available = lambda device: True
    from nmt.cli.train import main as train_main

    train_main(sys.argv[1:])


if __name__ == "__main__":
    main()
