"""Reading a checkpoint file without ever running code, every failure turned into one line.

``torch.load(weights_only=True)`` refuses a pickled callable instead of calling it; before it, the
zip's CRCs are checked (torch does not notice a flipped byte in tensor data). A damaged file's
error names the newest good checkpoint beside it, so the user knows what to resume from.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, Iterable

import torch

from nmt.bounded_read import regular_file
from nmt.checkpoint.errors import CheckpointError

_NMT_TRAIN_NAME = re.compile(r"checkpoint(?:_last|_best|\d+|_\d+_\d+|\.best_.+)\.pt")


class DamagedFile(CheckpointError):
    """Raised by :func:`read_file`; :func:`damaged` turns it into a message naming a good checkpoint."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"checkpoint {path} is truncated or corrupted ({why})")
        self.path, self.why = path, why


def read_file(path: Path) -> dict[str, Any]:
    """The checkpoint's top-level dict, loaded weights-only on the CPU; any failure is a CheckpointError."""
    regular_file(path, CheckpointError, "give a checkpoint written by nmt-train",
                 missing=f"checkpoint {path}: no such file; check the path (or --save-dir / --restore-file)")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise DamagedFile(path, f"not a complete zip: {e}") from None
    if bad is not None:
        raise DamagedFile(path, f"bad CRC in member {bad}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" in str(e).lower():
            # torch's own text goes on to explain how to allow-list the global or to load unsafely:
            # advice nobody should follow for a file that does this, so none of it is quoted.
            raise CheckpointError(
                f"checkpoint {path} is refused: its pickle names a Python class or function, which could run "
                "code when loaded, so it is not loaded; nmt checkpoints hold only tensors and plain values: "
                "use one written by nmt-train or nmt-average-checkpoints"
            ) from None
        raise DamagedFile(path, str(e).splitlines()[0][:160]) from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise DamagedFile(path, f"{type(e).__name__}: {first}") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise CheckpointError(f"checkpoint {path} is not an nmt checkpoint (no format_version); "
                              "give a checkpoint written by nmt-train")
    return state


def _checkpoint_order(path: Path) -> tuple[int, int, float]:
    """Sort key, newest last: (epoch, updates) parsed from the name, then the modification time."""
    m = re.fullmatch(r"checkpoint_?(\d+)(?:_(\d+))?\.pt", path.name)
    epoch, updates = (int(m.group(1)), int(m.group(2) or 1 << 62)) if m else (-1, -1)
    with contextlib.suppress(OSError):
        return epoch, updates, path.stat().st_mtime
    return epoch, updates, 0.0


def previous_good_checkpoint(folder: str | os.PathLike, exclude: Iterable[str | os.PathLike] = ()) -> Path | None:
    """The newest checkpoint*.pt in ``folder`` that reads back whole (other than ``exclude`` and its hard links)."""
    folder = Path(folder)
    excluded = [Path(p) for p in exclude]
    candidates = sorted((p for p in folder.glob("checkpoint*.pt") if p.is_file()), key=_checkpoint_order, reverse=True)
    for path in candidates:
        if any(path == e or (e.exists() and os.path.samefile(path, e)) for e in excluded):
            continue
        try:
            read_file(path)
        except CheckpointError:
            continue
        return path
    return None


def written_by_nmt_train(path: Path) -> bool:
    """Whether ``path`` bears a name nmt-train gives its checkpoints (checkpoint_last.pt, checkpoint_best.pt,
    checkpoint3.pt, checkpoint_3_500.pt, checkpoint.best_loss_4.2000.pt): only such a file may be
    suggested for deletion, never a file of the user's (``--path /etc/passwd``)."""
    return _NMT_TRAIN_NAME.fullmatch(path.name) is not None


def damaged(error: DamagedFile) -> CheckpointError:
    """``error`` with the fix: the newest good checkpoint beside the damaged one; else, for a checkpoint
    nmt-train wrote, what to delete to start afresh; else which file to give instead."""
    path = error.path
    good = previous_good_checkpoint(path.parent, exclude=[path])
    ours = written_by_nmt_train(path)
    what = "is truncated or corrupted" if ours else "is not a checkpoint, or is truncated or corrupted"
    if good:
        fix = f"the previous good checkpoint is {good}: resume from it with --restore-file {good}"
    elif ours:
        fix = f"no other good checkpoint is in {path.parent}; delete {path.name} to start afresh"
    else:
        fix = "give a checkpoint written by nmt-train or nmt-average-checkpoints"
    return CheckpointError(f"checkpoint {path} {what} ({error.why}); {fix}")
