"""Config shared by every command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nmt.fields import opt


@dataclass
class CommonConfig:
    seed: int = opt(1, "Random seed (data order, initialisation, dropout, sampling).", low=0, high=2**32 - 1)
    user_dir: Optional[str] = opt(None, "A folder of your own plugins to import (every .py file in it).")
    debug: bool = opt(False, "On error, print the full traceback instead of one line.")
    no_progress_bar: bool = opt(False, "Do not draw progress bars (they are off anyway when not a terminal).")
