#!/usr/bin/env bash
# Install nmt into the current Python environment (a venv is recommended).
# torch comes first and only when none is present: a user with a GPU installs their own CUDA build
# before running this (as fairseq's README says); otherwise torch==2.13.0 (CPU) is taken.
# Usage: scripts/install.sh [extras]   e.g. scripts/install.sh dev,plot
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
extras=${1:-dev}
"$PY" -m pip install -q -e ".[${extras}]"
"$PY" -c "import torch, nmt; print('nmt installed; torch', torch.__version__)"
