#!/usr/bin/env bash
# Set up SOAR Lab in ./.venv (Python 3.11). Idempotent: a second run is quick.
#   bash scripts/setup.sh          the pipeline on CPU (the embedded default) and the tests
#   bash scripts/setup.sh --gpu    also .venv-sglang: SGLang in its own environment (it pins its own
#                                  torch and transformers), which engine=sglang starts (engine.python)
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=false
for arg in "$@"; do
    case "$arg" in
        --gpu) gpu=true ;;
        *) echo "setup: error: unknown option $arg. Fix: use no option, or --gpu" >&2; exit 2 ;;
    esac
done

# System packages, installed as root with apt-get where one is missing (a fresh Debian has none of them):
#   python3-venv git         the project's own environment; DVC works in a git repository
#   g++ python3-dev          torch's inductor compiles GPTQModel's CPU kernels (the default quant preset)
#   podman runc catatonit    the serving image (engine.launcher=container; `run --init` needs catatonit)
#   mmdebstrap               the serving image's Debian base
#   procps                   pgrep and ps, which the tests use to find leftover processes
phases=() phase_start=$SECONDS
phase_done() {  # phase_done NAME: the seconds since the last phase, for the closing line's breakdown
    phases+=("$1 $((SECONDS - phase_start)) s"); phase_start=$SECONDS
}
need=()
command -v python3.11 >/dev/null || command -v python3 >/dev/null || need+=(python3)
python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
python3 -c "import os, sysconfig; raise SystemExit(not os.path.exists(sysconfig.get_paths()['include'] + '/Python.h'))" \
    2>/dev/null || need+=(python3-dev)
for tool in git g++ podman runc mmdebstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
command -v pgrep >/dev/null || need+=(procps)
[ -x /usr/libexec/podman/catatonit ] || command -v catatonit >/dev/null || need+=(catatonit)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing ${need[*]} (apt-get)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
            || echo "setup: WARNING: could not install ${need[*]}; what needs them will say so" >&2
    else
        echo "setup: WARNING: missing ${need[*]}: install them as root (apt-get install ${need[*]})" >&2
    fi
fi
phase_done "system packages"

# pip byte-compiles what it installs on one core; installing without that, then compiling the whole
# environment on every core, gives the same .pyc files sooner.
pip_install() {  # pip_install PYTHON PIP-ARGS...
    # Without pip's line per package that a local `file://` index lacks (pip.conf's extra-index-url), which says
    # nothing the user must act on; pip's own exit status stays the function's (pipefail).
    local python=$1; shift
    "$python" -m pip install -q --no-compile "$@" 2>&1 \
        | { grep -v "^WARNING: Location 'file://.*' is ignored: it is neither a file nor a directory\.$" || true; }
}
compile_env() {  # compile_env PYTHON: only when a package was installed since the last time (this project's
    # editable install, redone by every run, needs none); compileall's failures are files some packages
    # ship that are not Python, which pip skips too
    local site marker
    site=$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    marker="$(dirname "$1")/../.compiled"
    if [ -e "$marker" ] && [ -z "$(find "$site" -mindepth 1 -maxdepth 1 -newer "$marker" \
            ! -name 'soarlab-*' ! -name '__editable__*soarlab*' -print -quit)" ]; then
        return 0
    fi
    "$1" -m compileall -q -j 0 "$site" >/dev/null || true
    touch "$marker"
}

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip_install .venv/bin/python --upgrade pip
phase_done "venv and pip"
# The CPU build first: a plain `torch` requirement would pull a multi-GB CUDA build.
pip_install .venv/bin/python "torch==2.13.0"
phase_done "torch"
extras=dev; $gpu && extras=dev,gpu
pip_install .venv/bin/python -e ".[$extras]"
phase_done "other packages"
compile_env .venv/bin/python
phase_done "byte-compiling"
echo "setup done in $SECONDS s ($(IFS=,; echo "${phases[*]}" | sed 's/,/, /g')): $(.venv/bin/soarlab --help | head -1)"

if $gpu; then
    # SGLang's own environment: requirements/sglang.txt pins a release that loads MiniCPM-SALA
    # (tests/repo/test_gpu_env.py resolves it against the package index for Linux x86-64).
    SGLANG_PYTHON=${SGLANG_PYTHON:-$(command -v python3.12 || command -v python3.11 || command -v python3)}
    [ -x .venv-sglang/bin/python ] || "$SGLANG_PYTHON" -m venv .venv-sglang
    pip_install .venv-sglang/bin/python --upgrade pip
    pip_install .venv-sglang/bin/python -r requirements/sglang.txt
    compile_env .venv-sglang/bin/python
    echo "setup done: $(.venv-sglang/bin/python -c 'import sglang; print("sglang", sglang.__version__)') in .venv-sglang (engine.python)"
fi
