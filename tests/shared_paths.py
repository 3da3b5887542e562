"""Where the workplace's shared data lies: ``../shared`` beside the checkout (override with NMT_SHARED).
Tests that need it skip when it is absent."""

import os
from pathlib import Path

SHARED = Path(os.environ.get("NMT_SHARED", Path(__file__).resolve().parents[2] / "shared"))
MULTI30K = SHARED / "data" / "multi30k"
PEER_FAIRSEQ = SHARED / "peer" / "fairseq-m30k"
