#!/usr/bin/env bash
# The GPU side of the recipes (scripts/README.md): run on the device machine from the folder that holds
# this repository's copy, with the packs of scripts/gpu/pack.sh in .gpu/c1 (and .gpu/c2 for `pipeline`).
#   bash scripts/gpu/device.sh unpack                    # unpack the packs this call carried (a call carries
#                                                        # 64 MiB at most: c1 and c2 come in two calls)
#   bash scripts/gpu/device.sh start 'STEP' ['STEP' ...]  # unpack, run the steps in a detached driver (pre-warming
#                                                        # the gptq_marlin JIT for `marlin`), then poll as below
#   bash scripts/gpu/device.sh poll SECONDS              # follow the driver until DONE or SECONDS; results to $OUT
# A STEP is `NAME ARGS...`: `marlin [--only ...]` runs marlin_check.py serve, `engine ARGS` engine_check.py,
# `pipeline` pipeline_check.sh on a copy of the checkout.
# Environment: POLL_S (how long `start` follows the driver, default 560), STEP_LIMIT_S (each step's time limit,
# default none).
# The driver outlives the call (setsid), so a follow-up `poll` call on the still-warm machine picks it up.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RES=/tmp/gpu_results
CODE=/tmp/gpu_code  # the driver runs from a copy: a later call that carries the code again replaces $REPO
PROJECT=/tmp/gpu_project  # the checkout's files, for `pipeline` (copied by `start`, for the same reason)
export PYTHONPATH=/tmp/site:$REPO/src PYTHONUNBUFFERED=1
# JIT caches in one folder, the layout engine.jit_cache_dir gives the servers (the recipes pass
# engine.jit_cache_dir=$JIT_CACHE_DIR), so the pre-warm below compiles what they load.
export JIT_CACHE_DIR=/tmp/jitcache
export TVM_FFI_CACHE_DIR=$JIT_CACHE_DIR/tvm-ffi TRITON_CACHE_DIR=$JIT_CACHE_DIR/triton FLASHINFER_WORKSPACE_BASE=$JIT_CACHE_DIR/flashinfer
# NVLink multicast stays off (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=$(command -v python3)

unpack() {  # each pack once per machine (a later call's checkout keeps the packs an earlier one carried)
  local pack
  mkdir -p /tmp/site
  for pack in "$PWD"/.gpu/c[0-9]*; do
    [ -f "/tmp/site/.unpacked-$(basename "$pack")" ] && continue
    for a in "$pack"/*.tar.xz; do xz -dc "$a" | tar x -C /tmp/site || return 1; done
    touch "/tmp/site/.unpacked-$(basename "$pack")"
  done
}

driver() {  # runs detached; one line per step in $RES/driver.log
  local mq=$REPO/mq  # the copy `start` made of the checkout's .gpu/mq
  cd "$REPO"  # SOAR Lab composes conf/ of the folder it runs in: this code's, not the checkout's
  case " $* " in *" marlin"*)  # only marlin's GPTQ phases load the gptq_marlin JIT modules: pre-warm them
    ( "$PY" -c 'import torch; from sglang.kernels.ops.quantization.gptq_marlin import _jit_gptq_marlin_module as m; m(torch.bfloat16)' > $RES/jit_gemm.log 2>&1 &
      "$PY" -c 'from sglang.kernels.ops.quantization.gptq_marlin_repack import _jit_gptq_marlin_repack_module as m; m()' > $RES/jit_repack.log 2>&1 &
      wait; date +%s > $RES/jit.done ) & ;;
  esac
  local steps=("$@") step name; declare -A prep
  for step in "${steps[@]}"; do  # the engine checks' speed sets are CPU work: make them now, alongside
    set -- $step; name=$1; shift
    case $name in engine*) "$PY" "$HERE/engine_check.py" --out $RES/$name --work /tmp/$name --prepare-only "$@" \
                             > $RES/$name.prep.log 2>&1 & prep[$name]=$! ;; esac
  done
  for step in "${steps[@]}"; do
    set -- $step; name=$1; shift
    echo "$(date +%T) step $name $*"
    # SIGINT at the limit: the recipes then stop their server, run their stop checks and keep what finished
    local limit=(timeout -s INT -k 60 "${STEP_LIMIT_S:-0}")
    case $name in
      marlin) "${limit[@]}" "$PY" "$HERE/marlin_check.py" serve --out $RES/marlin --inputs "$mq" --jit-done $RES/jit.done "$@" ;;
      engine*) wait "${prep[$name]}"; "${limit[@]}" "$PY" "$HERE/engine_check.py" --out $RES/$name --work /tmp/$name "$@" ;;
      pipeline) PY=$PY GIT_DEB=$PROJECT.git.deb "${limit[@]}" bash "$HERE/pipeline_check.sh" $PROJECT $RES/pipeline ;;
      *) echo "unknown step $name" ;;
    esac > $RES/$name.log 2>&1
    local rc=$?  # before any $(...) below resets it
    echo "$(date +%T) step $name rc=$rc $(grep -h '^SUMMARY' $RES/$name.log | cut -c1-600)"
  done
  wait
  echo "$(date +%T) DONE"
}

poll() {
  [ -f $RES/driver.log ] || { echo "no driver on this machine (a fresh one?): run start again"; return 3; }
  local end=$(( $(date +%s) + $1 ))
  copy() {  # what $OUT holds comes back even when the call is cut at its limit: keep it current
    [ -n "${OUT:-}" ] || return 0
    for f in $RES/*/results.json; do [ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")").json"; done
  }
  until grep -q DONE $RES/driver.log 2>/dev/null || [ "$(date +%s)" -ge "$end" ]; do copy; sleep 5; done
  cat $RES/driver.log
  copy; [ -n "${OUT:-}" ] && tar czf "$OUT/results.tgz" -C $RES . 2>/dev/null
  grep -q DONE $RES/driver.log
}

case ${1:-} in
  start)
    shift; rm -rf $RES; mkdir -p $RES  # no stale driver.log (its DONE) from an earlier start on this machine
    t=$(date +%s); unpack || { echo "unpack failed"; exit 1; }; echo "unpacked in $(( $(date +%s) - t )) s"
    nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
    "$PY" -c 'import sys, torch, sglang, transformers; print(sys.version.split()[0], torch.__version__, sglang.__version__, transformers.__version__)'
    rm -rf $CODE && mkdir -p $CODE && (cd "$REPO" && tar cf - src conf scripts pyproject.toml) | tar xf - -C $CODE
    mq=$PWD/.gpu/mq; [ -d "$mq" ] && cp -r "$mq" $CODE/mq
    rm -rf $PROJECT && mkdir -p $PROJECT && tar cf - --exclude=./.gpu --exclude=./.git . | tar xf - -C $PROJECT
    [ -f .gpu/c2/git.deb ] && cp .gpu/c2/git.deb $PROJECT.git.deb  # git for an image without it
    setsid nohup bash $CODE/scripts/gpu/device.sh _driver "$@" > $RES/driver.log 2>&1 < /dev/null &
    until [ -f $RES/driver.log ]; do sleep 0.2; done
    poll "${POLL_S:-560}" ;;
  _driver) shift; driver "$@" ;;
  poll) poll "${2:-560}" ;;
  unpack) t=$(date +%s); unpack || { echo "unpack failed"; exit 1; }; echo "unpacked in $(( $(date +%s) - t )) s" ;;
  *) echo "usage: $0 unpack | start STEP... | poll SECONDS"; exit 2 ;;
esac
