#!/usr/bin/env bash
# Set up SOAR Lab in ./.venv on a CPU machine (Python 3.11). Idempotent: a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build first: a plain `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
echo "setup done: $(.venv/bin/soarlab --help | head -1)"
