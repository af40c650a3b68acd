#!/usr/bin/env bash
# Set up SOAR Lab in ./.venv on a CPU machine (Python 3.11). Idempotent: a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
# The serving image's tools (engine.launcher=container, its tests): Podman with runc, and mmdebstrap for
# the Debian base. Installed as root when apt-get exists and one is missing; otherwise the image tests skip.
missing=""
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing$missing (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$missing >/dev/null \
        || echo "setup: WARNING: could not install$missing; the container tests will be skipped" >&2
fi
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build first: a plain `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
echo "setup done: $(.venv/bin/soarlab --help | head -1)"
