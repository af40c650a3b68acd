#!/usr/bin/env bash
# The GPU side of the recipes (scripts/README.md), on any NVIDIA GPU host with Python 3.12 and a CUDA
# build of torch, online or not. Run from the checkout root:
#   bash scripts/gpu/run.sh unpack PACKS          # unpack what scripts/gpu/pack.sh wrote into PACKS, once
#   bash scripts/gpu/run.sh STEP ['STEP' ...]     # run the recipes in order, in the foreground
# A STEP is `NAME ARGS...`: `marlin [--only ...]` runs marlin_check.py serve, `engine* ARGS` engine_check.py
# (e.g. 'engine60k --profile 60k-0.5k'), `pipeline` pipeline_check.sh on a copy of the checkout, `spec [ARGS]`
# serving_check.py's speculative decoding (spec=none, standalone, ngram on one small Llama and its trained
# draft), `formats [ARGS]` its weight and KV formats (bf16, FP8 weights, FP8 KV cache, gptq_w4 on Marlin).
# Environment: SITE (where the packs are unpacked, default ~/.cache/soarlab/gpu-site), RESULTS (default
# ./gpu-results: one folder per step with its results.json, a log per step, run.log), STEP_LIMIT_S
# (each step's time limit; SIGINT at the limit, so the recipe stops its server and keeps what finished).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SITE=${SITE:-$HOME/.cache/soarlab/gpu-site}
RES=$(mkdir -p "${RESULTS:-$REPO/gpu-results}" && cd "${RESULTS:-$REPO/gpu-results}" && pwd)
export PYTHONPATH=$SITE:$REPO/src PYTHONUNBUFFERED=1
# JIT caches in one folder, the layout engine.jit_cache_dir gives the servers (the recipes pass
# engine.jit_cache_dir=$JIT_CACHE_DIR), so the pre-warm below compiles what they load.
export JIT_CACHE_DIR=${JIT_CACHE_DIR:-$HOME/.cache/soarlab/sglang-jit}
export TVM_FFI_CACHE_DIR=$JIT_CACHE_DIR/tvm-ffi TRITON_CACHE_DIR=$JIT_CACHE_DIR/triton FLASHINFER_WORKSPACE_BASE=$JIT_CACHE_DIR/flashinfer
PY=${PY:-$(command -v python3)}

unpack() {  # every archive of PACKS into $SITE; git's .deb beside it, for a host without git
  local packs=$1 archive
  [ -d "$packs" ] || { echo "run.sh: error: $packs is not a folder. Fix: give the folder scripts/gpu/pack.sh wrote"; return 2; }
  mkdir -p "$SITE"
  for archive in "$packs"/*.tar.xz; do xz -dc "$archive" | tar x -C "$SITE" || return 1; done
  [ -f "$packs/git.deb" ] && cp "$packs/git.deb" "$SITE/git.deb"
  return 0
}

prewarm_marlin() {  # only marlin's GPTQ phases load the gptq_marlin JIT modules: compile them beside the other steps
  ( "$PY" -c 'import torch; from sglang.kernels.ops.quantization.gptq_marlin import _jit_gptq_marlin_module as m; m(torch.bfloat16)' > "$RES/jit_gemm.log" 2>&1 &
    "$PY" -c 'from sglang.kernels.ops.quantization.gptq_marlin_repack import _jit_gptq_marlin_repack_module as m; m()' > "$RES/jit_repack.log" 2>&1 &
    wait; date +%s > "$RES/jit.done" ) &
}

run_steps() {  # one line per step in $RES/run.log
  cd "$REPO"  # SOAR Lab composes the conf/ of the folder it runs in
  rm -f "$RES/jit.done"
  case " $* " in *" marlin"*|*" formats"*) prewarm_marlin ;; esac
  local steps=("$@") step name; declare -A prep
  for step in "${steps[@]}"; do  # the engine checks' speed sets are CPU work: make them now, alongside
    set -- $step; name=$1; shift
    case $name in engine*) "$PY" "$HERE/engine_check.py" --out "$RES/$name" --work "/tmp/soarlab-$name" --prepare-only "$@" \
                             > "$RES/$name.prep.log" 2>&1 & prep[$name]=$! ;; esac
  done
  for step in "${steps[@]}"; do
    set -- $step; name=$1; shift
    echo "$(date +%T) step $name $*"
    local limit=(timeout -s INT -k 60 "${STEP_LIMIT_S:-0}")
    case $name in
      marlin) "${limit[@]}" "$PY" "$HERE/marlin_check.py" serve --out "$RES/marlin" --inputs "$REPO/.gpu/mq" --jit-done "$RES/jit.done" "$@" ;;
      engine*) wait "${prep[$name]}"; "${limit[@]}" "$PY" "$HERE/engine_check.py" --out "$RES/$name" --work "/tmp/soarlab-$name" "$@" ;;
      pipeline) PY=$PY GIT_DEB=$SITE/git.deb "${limit[@]}" bash "$HERE/pipeline_check.sh" "$REPO" "$RES/pipeline" ;;
      spec) "${limit[@]}" "$PY" "$HERE/serving_check.py" --out "$RES/spec" --variants none standalone ngram "$@" ;;
      formats) "${limit[@]}" "$PY" "$HERE/serving_check.py" --out "$RES/formats" --jit-done "$RES/jit.done" \
                 --variants none fp8 fp8_kv gptq_w4 "$@" ;;  # gptq_w4 last: the JIT pre-warm finishes meanwhile
      *) echo "unknown step $name (use marlin, engine..., pipeline, spec, formats)" ;;
    esac > "$RES/$name.log" 2>&1
    local rc=$?  # before any $(...) below resets it
    echo "$(date +%T) step $name rc=$rc $(grep -h '^SUMMARY' "$RES/$name.log" | cut -c1-600)"
  done
  wait
  echo "$(date +%T) done"
}

case ${1:-} in
  unpack)
    [ -n "${2:-}" ] || { echo "usage: $0 unpack PACKS"; exit 2; }
    t=$(date +%s); unpack "$2"; rc=$?
    [ $rc = 2 ] && exit 2
    [ $rc = 0 ] || { echo "run.sh: error: unpacking $2 failed. Fix: pack again with scripts/gpu/pack.sh"; exit 1; }
    echo "unpacked into $SITE in $(( $(date +%s) - t )) s" ;;
  ""|-h|--help) echo "usage: $0 unpack PACKS | STEP [STEP ...]"; exit 2 ;;
  *)
    nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
    "$PY" -c 'import sys, torch, sglang, transformers; print(sys.version.split()[0], torch.__version__, sglang.__version__, transformers.__version__)' \
      || { echo "run.sh: error: SGLang does not import. Fix: bash scripts/gpu/run.sh unpack PACKS first (SITE=$SITE)"; exit 1; }
    run_steps "$@" 2>&1 | tee "$RES/run.log" ;;
esac
