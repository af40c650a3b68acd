#!/usr/bin/env bash
# Entrypoint of the submission image: what the platform does, in its order (RULES.md 4).
set -euo pipefail
export SOARLAB_SKIP_INSTALL=1   # installed at build time
source /submission/prepare_env.sh
if [ ! -f "$SOARLAB_MODEL_OUTPUT/config.json" ]; then
    bash /submission/prepare_model.sh --input "$SOARLAB_MODEL_INPUT" --output "$SOARLAB_MODEL_OUTPUT"
fi
# SGLANG_SERVER_ARGS is split into words on purpose, as the platform does.
# shellcheck disable=SC2086
exec python3 -m sglang.launch_server --model-path "$SOARLAB_MODEL_OUTPUT" --host 0.0.0.0 --port "$SOARLAB_PORT" $SGLANG_SERVER_ARGS
