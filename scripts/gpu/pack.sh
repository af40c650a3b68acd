#!/usr/bin/env bash
# Pack what the GPU recipes need beyond the GPU image (scripts/README.md), on a CPU machine with PyPI:
#   bash scripts/gpu/pack.sh DEST [SRC_CHECKOUT]
# DEST/c1/core.tar.xz: SGLang 0.5.17 and the wheels of scripts/gpu/wheels.txt for CPython 3.12 (unpacked
#   here with this machine's pip; no Python 3.12 needed), pruned of what a dense Llama on an H200 never
#   loads. About 55 MiB. DEST/c1/extras.tar.xz: hydra-core/omegaconf/antlr4 for SOAR Lab's config (0.2 MiB).
# DEST/c2 (only with PY312=a Python 3.12): DVC, MLflow, lm-eval and the rest of pipeline-wheels.txt, and
#   git's .deb, for pipeline_check.sh (about 29 MiB).
# DEST/repo: src/, conf/, scripts/ and pyproject.toml of SRC_CHECKOUT (default: this one).
# Not packed: FA3 (sgl_kernel/flash_ops.abi3.so, 127 MiB packed, three more calls): the recipes use
# --attention-backend triton.
set -euo pipefail
DEST=$(mkdir -p "$1" && cd "$1" && pwd)
SRC=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
WORK=${PACK_WORK:-$DEST/.pack}
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
   --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
mkdir -p "$WORK/all" "$DEST/c1"
# --isolated: a site-wide pip config (constraints, extra indexes) must not bend the pins; PIP_CERT still applies
python3 -m pip --isolated download ${PIP_CERT:+--cert "$PIP_CERT"} $P -d "$WORK/all" -r "$SRC/scripts/gpu/wheels.txt"
rm -rf "$WORK/site"
python3 -m pip --isolated install $P --no-index --no-compile --target "$WORK/site" "$WORK"/all/*.whl
cd "$WORK/site"
rm -rf sgl_kernel/sm100 sgl_kernel/infllm_ops*.so sgl_kernel/flashmla_ops.abi3.so xgrammar/lib zstandard/_cffi*.so \
  sglang/multimodal_gen
find . -name __pycache__ -prune -exec rm -rf {} +
tar cf - --exclude=sgl_kernel/flash_ops.abi3.so . | xz -9 -T0 > "$DEST/c1/core.tar.xz.tmp"
mv "$DEST/c1/core.tar.xz.tmp" "$DEST/c1/core.tar.xz"
# SOAR Lab's config (hydra-core, omegaconf, antlr4): pure Python, taken from the project venv at the pinned
# versions (antlr4-python3-runtime 4.9.3 is sdist-only on PyPI, so --only-binary finds none).
(cd "$SRC"/.venv/lib/python3.*/site-packages && tar cf - --exclude=__pycache__ hydra omegaconf antlr4) | xz -6 > "$DEST/c1/extras.tar.xz"
[ -z "${PY312:-}" ] || bash "$SRC/scripts/gpu/pack_pipeline.sh" "$DEST" "$SRC"
rm -rf "$DEST/repo" && mkdir -p "$DEST/repo"
(cd "$SRC" && tar cf - --exclude=__pycache__ src conf scripts pyproject.toml) | tar xf - -C "$DEST/repo"
du -sh "$DEST/c1/core.tar.xz" "$DEST/repo"
