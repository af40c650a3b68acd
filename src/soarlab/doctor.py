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


def check_package(name: str, dist: str | None = None, note: str = "", import_it: bool = False) -> tuple[str, bool, str]:
    """Installed? With import_it, also imported in a child process (a clean, bounded check of why it fails)."""
    import importlib.util

    dist = dist or name
    if importlib.util.find_spec(name) is None:
        return name, False, f"not installed{note}"
    version = _version(dist) or "installed"
    if not import_it:
        return name, True, version
    code, out = _run([sys.executable, "-c", f"import {name}"], timeout=180)
    if code != 0:
        return name, False, f"{version} installed but import failed: {_first_line(out) or 'no output'}{note}"[:300]
    return name, True, f"{version} (imports)"


def check_container_engines() -> list[tuple[str, bool, str]]:
    """Docker and Podman, as package.container_cli=auto tries them (soarlab.container)."""
    from soarlab.container import CLIS, make_cli

    rows = []
    for name in CLIS:
        if shutil.which(name) is None:
            rows.append((f"{name} engine", False, "not installed"))
            continue
        cli = make_cli(name)
        try:
            proc = cli.run(["version", "--format", "{{.Server.Version}}" if name == "docker" else "{{.Version}}"], timeout=60)
        except subprocess.TimeoutExpired:
            rows.append((f"{name} engine", False, f"`{name} version` timed out"))
            continue
        ok = proc.returncode == 0 and proc.stdout.strip() != ""
        rows.append((f"{name} engine", ok, proc.stdout.strip() if ok else f"no engine answers: {_first_line(proc.stderr)}"[:300]))
    return rows


def check_nvidia_smi() -> tuple[str, bool, str]:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi", False, "not installed (no NVIDIA driver here)"
    code, out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    if code != 0:
        return "nvidia-smi", False, f"failed: {_first_line(out)}"
    return "nvidia-smi", True, "; ".join(line.strip() for line in out.splitlines() if line.strip())


def collect() -> list[tuple[str, bool, str]]:
    rows = [check_python()]
    rows += check_torch()
    rows.append(check_package("transformers"))
    rows.append(check_package("gptqmodel", note=" (needed by the quantize stage)"))
    rows.append(check_package("sglang", import_it=True, note=" (GPU machines: pip install 'soarlab[gpu]'; here use engine=transformers)"))
    rows += check_container_engines()
    rows.append(check_nvidia_smi())
    from soarlab import leftovers

    rows += leftovers.collect()
    return rows


def format_table(rows: list[tuple[str, bool, str]]) -> str:
    width = max(len(name) for name, _, _ in rows)
    return "\n".join(f"{name:<{width}}  {'OK' if ok else 'NO':<2}  {detail}" for name, ok, detail in rows)


def doctor_cli(args=None) -> int:
    print(format_table(collect()))
    return 0
