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
# DEST/c2 (for pipeline_check.sh; a second call, since c1 leaves too little of the 64 MiB): the pipeline's
# own packages (pipeline-wheels.txt) for CPython 3.12, resolved by a real Python 3.12 ($PY312) under the
# core's pins, less what the image or the core has; and git's .deb, for an image without git.
if [ -n "${PY312:-}" ]; then
  rm -rf "$WORK/v312" && "$PY312" -m venv "$WORK/v312"
  grep -v '^sglang==' "$SRC/scripts/gpu/wheels.txt" > "$WORK/core-pins.txt"
  "$WORK/v312/bin/pip" --isolated install -q ${PIP_CERT:+--cert "$PIP_CERT"} -c "$WORK/core-pins.txt" \
    -r "$SRC/scripts/gpu/pipeline-wheels.txt"
  mkdir -p "$DEST/c2"
  "$WORK/v312/bin/python" - "$SRC/scripts/gpu" "$DEST/c2/deps.tar.xz" <<'EOF'
import importlib.metadata as md, os, re, sys, tarfile
here, out = sys.argv[1], sys.argv[2]
norm = lambda s: re.sub(r"[-_.]+", "-", s.strip().lower())
names = lambda f: {norm(re.split(r"[=<>\[ ]", l)[0]) for l in open(f) if l.strip() and not l.startswith("#")}
skip = names(f"{here}/image-packages.txt") | names(f"{here}/wheels.txt")
site = next(p for p in sys.path if p.endswith("site-packages"))
files = sorted({str(f) for d in md.distributions(path=[site]) if norm(d.metadata["Name"]) not in skip
                and not norm(d.metadata["Name"]).startswith(("nvidia-", "cuda-", "torch", "triton"))
                and d.metadata["Name"] not in ("pip", "setuptools")
                for f in d.files or [] if "__pycache__" not in str(f) and not str(f).startswith("..")})
with tarfile.open(out + ".tmp", "w:xz", preset=6) as t:
    for f in files:
        if os.path.exists(os.path.join(site, f)):
            t.add(os.path.join(site, f), arcname=f, recursive=False)
os.replace(out + ".tmp", out)
EOF
  ! command -v apt-get > /dev/null || (cd "$WORK" && apt-get download git && mv git_*.deb "$DEST/c2/git.deb")
  du -sh "$DEST/c2"/*
fi
rm -rf "$DEST/repo" && mkdir -p "$DEST/repo"
(cd "$SRC" && tar cf - --exclude=__pycache__ src conf scripts pyproject.toml) | tar xf - -C "$DEST/repo"
du -sh "$DEST/c1/core.tar.xz" "$DEST/repo"
