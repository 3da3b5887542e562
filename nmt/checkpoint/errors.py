"""The error every checkpoint problem raises (its own module so every other one can import it)."""

from __future__ import annotations

from nmt.errors import DataError


class CheckpointError(DataError):
    """A checkpoint file is missing, damaged, unsafe, from an incompatible nmt, or of another model."""
