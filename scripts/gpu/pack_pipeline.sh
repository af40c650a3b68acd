#!/usr/bin/env bash
# DEST/pipeline.tar.xz and DEST/git.deb for pipeline_check.sh (pack.sh calls this when PY312 is set): the
# pipeline's own packages (pipeline-wheels.txt) for CPython 3.12, resolved by a real Python 3.12 ($PY312)
# under the core's pins, less what the GPU host's Python already has (image-packages.txt) or the core
# (wheels.txt); and git's .deb, for a host without git. About 29 MiB.
#   PY312=python3.12 bash scripts/gpu/pack_pipeline.sh DEST [SRC_CHECKOUT]
set -euo pipefail
DEST=$(mkdir -p "$1" && cd "$1" && pwd)
SRC=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
WORK=${PACK_WORK:-${TMPDIR:-/tmp}/soarlab-gpu-pack}  # downloads and a scratch install, kept out of DEST
mkdir -p "$WORK"
rm -rf "$WORK/v312" && "$PY312" -m venv "$WORK/v312"
grep -v '^sglang==' "$SRC/scripts/gpu/wheels.txt" > "$WORK/core-pins.txt"
"$WORK/v312/bin/pip" --isolated install -q ${PIP_CERT:+--cert "$PIP_CERT"} -c "$WORK/core-pins.txt" \
  -r "$SRC/scripts/gpu/pipeline-wheels.txt"
"$WORK/v312/bin/python" - "$SRC/scripts/gpu" "$DEST/pipeline.tar.xz" <<'EOF'
import importlib.metadata as md, os, re, sys, tarfile
here, out = sys.argv[1], sys.argv[2]
norm = lambda s: re.sub(r"[-_.]+", "-", s.strip().lower())
names = lambda f: {norm(re.split(r"[=<>\[ ]", l)[0]) for l in open(f) if l.strip() and not l.startswith("#")}
skip = names(f"{here}/image-packages.txt") | names(f"{here}/wheels.txt") | {"pip", "setuptools"}
site = next(p for p in sys.path if p.endswith("site-packages"))
# torch and its CUDA libraries (which lm-eval's torch requirement pulls in here) are the GPU host's own
gpu_stack = ("torch", "triton", "nvidia-", "cuda-")
files = sorted({str(f) for d in md.distributions(path=[site])
                if norm(d.metadata["Name"]) not in skip and not norm(d.metadata["Name"]).startswith(gpu_stack)
                for f in d.files or [] if "__pycache__" not in str(f) and not str(f).startswith("..")})
with tarfile.open(out + ".tmp", "w:xz", preset=6) as tar:
    for f in files:
        if os.path.exists(os.path.join(site, f)):
            tar.add(os.path.join(site, f), arcname=f, recursive=False)
os.replace(out + ".tmp", out)
EOF
! command -v apt-get > /dev/null || (cd "$WORK" && apt-get download git && mv git_*.deb "$DEST/git.deb")
du -sh "$DEST/pipeline.tar.xz"
