"""`soarlab doctor`: what this machine can run, and what earlier runs left behind (soarlab.leftovers).
Prints one row per component (OK/NO and why, with the fix); exits 0."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
import sys


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(cmd: list[str], timeout: float = 20) -> tuple[int | None, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return None, "not found"
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g}s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def _first_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:limit]


def check_python() -> tuple[str, bool, str]:
    return "python", sys.version_info >= (3, 11), f"{platform.python_version()} ({sys.executable})"


def check_torch() -> list[tuple[str, bool, str]]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - report any import failure
        return [("torch", False, f"not importable: {exc}"), ("cuda", False, "no torch")]
    rows = [("torch", True, torch.__version__)]
    try:
        available = torch.cuda.is_available()
    except Exception as exc:  # noqa: BLE001
        return rows + [("cuda", False, f"torch.cuda failed: {exc}")]
    if not available:
        build = torch.version.cuda
        why = "no GPU: torch is a CPU build" if build is None else f"no GPU visible (torch built for CUDA {build})"
        return rows + [("cuda", False, why)]
    gpus = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        gpus.append(f"{torch.cuda.get_device_name(i)} (compute capability {major}.{minor})")
    return rows + [("cuda", True, f"CUDA {torch.version.cuda}; " + "; ".join(gpus))]


def check_package(name: str, dist: str | None = None, note: str = "") -> tuple[str, bool, str]:
    import importlib.util

    if importlib.util.find_spec(name) is None:
        return name, False, f"not installed{note}"
    return name, True, _version(dist or name) or "installed"


def check_container_engines(image: str) -> list[tuple[str, bool, str]]:
    """Docker and Podman, as package.container_cli=auto tries them (soarlab.container): each proven by
    starting a trivial container from `image` (the CPU image's local Debian base) as the serving image
    is started (`run --init`), since a binary that answers `version` can still fail to run one."""
    from soarlab.container import CLIS, probe

    rows = []
    for name in CLIS:
        cli, why = probe(name)
        if cli is None:
            rows.append((f"{name} engine", False, why))
            continue
        try:
            if not cli.image_exists(image):
                rows.append((f"{name} engine", False, f"no image {image} to start a test container from: "
                                                      "`soarlab base-image` makes it"))
                continue
            proc = cli.run(["run", "--rm", "--init", "--network", "none", image, "true"], timeout=120)
        except subprocess.TimeoutExpired:
            rows.append((f"{name} engine", False, f"`{name} run` timed out"))
            continue
        ok = proc.returncode == 0
        rows.append((f"{name} engine", ok, f"started and stopped a container from {image}" if ok
                     else f"cannot start a container: {_first_line(proc.stderr or proc.stdout)}"[:300]))
    return rows


def check_sglang(python: str | None) -> tuple[str, bool, str]:
    """The interpreter engine=sglang starts (engine.python: SGLang's own environment)."""
    from soarlab.engines.sglang import sglang_python

    exe = sglang_python(python)
    if not exe.is_file():
        return "sglang", False, f"engine.python {exe} does not exist: `bash scripts/setup.sh --gpu` makes it (GPU machines)"
    code, out = _run([str(exe), "-c", "import importlib.metadata as m; print(m.version('sglang'))"])
    if code != 0:
        return "sglang", False, f"not installed in engine.python {exe}: `bash scripts/setup.sh --gpu`"
    return "sglang", True, f"{out.splitlines()[-1]} in engine.python {exe}"


def check_nvidia_smi() -> tuple[str, bool, str]:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi", False, "not installed (no NVIDIA driver here)"
    code, out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    if code != 0:
        return "nvidia-smi", False, f"failed: {_first_line(out)}"
    return "nvidia-smi", True, "; ".join(line.strip() for line in out.splitlines() if line.strip())


def collect() -> list[tuple[str, bool, str]]:
    from soarlab.config import compose

    sglang_engine = compose(["engine=sglang"])
    rows = [check_python()]
    rows += check_torch()
    rows.append(check_package("transformers"))
    rows.append(check_package("gptqmodel", note=" (needed by the quantize stage)"))
    rows.append(check_sglang(sglang_engine.engine.python))
    rows += check_container_engines(str(sglang_engine.package.cpu_image.base))
    rows.append(check_nvidia_smi())
    from soarlab import leftovers

    rows += leftovers.collect()
    return rows


def format_table(rows: list[tuple[str, bool, str]]) -> str:
    width = max(len(name) for name, _, _ in rows)
    return "\n".join(f"{name:<{width}}  {'OK' if ok else 'NO':<2}  {detail}" for name, ok, detail in rows)

