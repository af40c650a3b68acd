#!/usr/bin/env bash
# Entrypoint of the serving image: the platform's flow, in its order (RULES.md 4).
#   <image> sglang [extra flags]         GPU image: SGLang with SGLANG_SERVER_ARGS from prepare_env.sh
#   <image> transformers [flags]         CPU image: `transformers serve` (soarlab's CPU engine)
# The server binds $SOARLAB_HOST:$SOARLAB_PORT, nothing else; the original model is mounted
# read-only at $SOARLAB_MODEL_INPUT, the processed one is written to $SOARLAB_MODEL_OUTPUT.
set -euo pipefail
engine="${1:-sglang}"
shift || true
echo "container: unpacking /submission.tar.gz"
rm -rf /submission && mkdir -p /submission && tar -xzf /submission.tar.gz -C /submission
# Sourced, as the platform does; it must not rely on (or leave) set -e / set -u.
set +eu
# shellcheck disable=SC1091
source /submission/prepare_env.sh
set -eu
echo "container: prepare_model.sh --input $SOARLAB_MODEL_INPUT --output $SOARLAB_MODEL_OUTPUT"
bash /submission/prepare_model.sh --input "$SOARLAB_MODEL_INPUT" --output "$SOARLAB_MODEL_OUTPUT"
echo "container: starting $engine on $SOARLAB_HOST:$SOARLAB_PORT"
case "$engine" in
    sglang)
        # SGLANG_SERVER_ARGS is split into words on purpose, as the platform does.
        # shellcheck disable=SC2086
        exec python3 -m sglang.launch_server --model-path "$SOARLAB_MODEL_OUTPUT" \
            --host "$SOARLAB_HOST" --port "$SOARLAB_PORT" $SGLANG_SERVER_ARGS "$@" ;;
    transformers)
        export PYTHONPATH="/submission/soarlab/src${PYTHONPATH:+:$PYTHONPATH}"
        # The --speculative-* flags of SGLANG_SERVER_ARGS (flag, value), which the CPU launcher takes too.
        speculative=(); value_next=0
        for word in $SGLANG_SERVER_ARGS; do
            case "$word" in
                --speculative-*) speculative+=("$word"); value_next=1 ;;
                --*) value_next=0 ;;
                *) if [ "$value_next" = 1 ]; then speculative+=("$word"); fi; value_next=0 ;;
            esac
        done
        exec python3 -m soarlab.engines.transformers_serve serve "$SOARLAB_MODEL_OUTPUT" \
            --host "$SOARLAB_HOST" --port "$SOARLAB_PORT" "${speculative[@]}" "$@" ;;
    *)
        echo "container: unknown engine $engine (sglang | transformers)" >&2; exit 2 ;;
esac
