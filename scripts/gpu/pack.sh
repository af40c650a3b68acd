#!/usr/bin/env bash
# Pack what the GPU recipes need beyond the GPU host's own Python (scripts/README.md), on a machine with
# the package index; copy DEST to the GPU host (which needs no network) and unpack it there with
# `bash scripts/gpu/run.sh unpack DEST`.
#   bash scripts/gpu/pack.sh DEST [SRC_CHECKOUT]
# DEST/core.tar.xz: SGLang 0.5.17 and the wheels of scripts/gpu/wheels.txt for CPython 3.12 (unpacked here
#   with this machine's pip; no Python 3.12 needed), less the parts these recipes never load (Blackwell
#   kernels, InfLLM and FlashMLA ops, grammar and zstd binaries, multimodal generation). About 55 MiB.
# DEST/extras.tar.xz: hydra-core/omegaconf/antlr4 for SOAR Lab's config (0.2 MiB).
# DEST/pipeline.tar.xz and DEST/git.deb (only with PY312=a Python 3.12): DVC, MLflow, lm-eval and the rest
#   of pipeline-wheels.txt, and git, for pipeline_check.sh (about 29 MiB).
# Not packed: FA3 (sgl_kernel/flash_ops.abi3.so, 127 MiB packed): the recipes use --attention-backend triton.
set -euo pipefail
DEST=$(mkdir -p "$1" && cd "$1" && pwd)
SRC=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
WORK=${PACK_WORK:-${TMPDIR:-/tmp}/soarlab-gpu-pack}  # downloads and a scratch install, kept out of DEST
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
   --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
mkdir -p "$WORK/all"
# --isolated: a site-wide pip config (constraints, extra indexes) must not bend the pins; PIP_CERT still applies
python3 -m pip --isolated download ${PIP_CERT:+--cert "$PIP_CERT"} $P -d "$WORK/all" -r "$SRC/scripts/gpu/wheels.txt"
rm -rf "$WORK/site"
python3 -m pip --isolated install $P --no-index --no-compile --target "$WORK/site" "$WORK"/all/*.whl
cd "$WORK/site"
rm -rf sgl_kernel/sm100 sgl_kernel/infllm_ops*.so sgl_kernel/flashmla_ops.abi3.so xgrammar/lib zstandard/_cffi*.so \
  sglang/multimodal_gen
find . -name __pycache__ -prune -exec rm -rf {} +
tar cf - --exclude=sgl_kernel/flash_ops.abi3.so . | xz -9 -T0 > "$DEST/core.tar.xz.tmp"
mv "$DEST/core.tar.xz.tmp" "$DEST/core.tar.xz"
# SOAR Lab's config (hydra-core, omegaconf, antlr4): pure Python, taken from the project venv at the pinned
# versions (antlr4-python3-runtime 4.9.3 is sdist-only on PyPI, so --only-binary finds none).
(cd "$SRC"/.venv/lib/python3.*/site-packages && tar cf - --exclude=__pycache__ hydra omegaconf antlr4) | xz -6 > "$DEST/extras.tar.xz"
[ -z "${PY312:-}" ] || bash "$SRC/scripts/gpu/pack_pipeline.sh" "$DEST" "$SRC"
du -sh "$DEST"/*.tar.xz
