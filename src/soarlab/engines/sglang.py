"""engine=sglang: `python -m sglang.launch_server` (GPU machine) or the same inside `docker run`.

The server flags come from `engine.server_args` (flag name -> value; true = bare flag,
false/null = omitted) plus `--quantization` from `quant.serve_quantization`. The same code
renders SGLANG_SERVER_ARGS for the submission's prepare_env.sh (`render_server_args`), so what
is benchmarked here is what the platform launches. Flags are always written with hyphens
(RULES.md 4): a key written with underscores is converted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from omegaconf import OmegaConf

from soarlab.engines.common import endpoint, opt
from soarlab.engines.process import check_port_free, managed_server
from soarlab.engines.server import Server
from soarlab.errors import SoarError

# Set by the launcher from engine.host / engine.port and the model directory, never by server_args.
RESERVED_FLAGS = ("model-path", "model", "host", "port")
# SGLang's JIT compilers and the variable that moves each one's cache under engine.jit_cache_dir.
JIT_CACHE_VARS = {"TVM_FFI_CACHE_DIR": "tvm-ffi", "TRITON_CACHE_DIR": "triton", "FLASHINFER_WORKSPACE_BASE": "flashinfer"}
CONTAINER_JIT_DIR = "/soarlab-jit-cache"


def jit_cache_env(cfg, base: str | None = None) -> dict[str, str]:
    """Environment that points the JIT caches at engine.jit_cache_dir (or `base`); {} when it is null."""
    configured = cfg.engine.get("jit_cache_dir")
    if not configured:
        return {}
    root = base or str(Path(str(configured)).expanduser())
    return {var: f"{root}/{sub}" for var, sub in JIT_CACHE_VARS.items()}


def flag_name(key: str) -> str:
    return str(key).strip().lstrip("-").replace("_", "-")


def server_flags(cfg) -> list[str]:
    """`engine.server_args` + `quant.serve_quantization` as an argv list, flags hyphenated."""
    raw = opt(cfg, "engine.server_args", None)
    args = OmegaConf.to_container(raw, resolve=True) if raw is not None and not isinstance(raw, dict) else (raw or {})
    flags: dict[str, object] = {}
    for key, value in args.items():
        name = flag_name(key)
        if name in flags:
            raise SoarError(
                f"engine.server_args sets --{name} twice (as {key!r} and another spelling)",
                "keep one key per flag, written with hyphens",
            )
        if name in RESERVED_FLAGS:
            raise SoarError(
                f"engine.server_args sets --{name}, which the launcher sets itself",
                "remove it; use engine.host / engine.port, the model comes from the pipeline",
            )
        flags[name] = value
    quant = opt(cfg, "quant.serve_quantization", None)
    if quant is not None:
        existing = flags.get("quantization")
        if existing not in (None, False) and str(existing) != str(quant):
            raise SoarError(
                f"engine.server_args.quantization={existing} disagrees with quant.serve_quantization={quant}",
                "drop quantization from engine.server_args (the quant preset sets it)",
            )
        flags["quantization"] = quant
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            argv += [f"--{name}", *(str(v) for v in value)]
        else:
            argv += [f"--{name}", str(value)]
    return argv


def render_server_args(cfg) -> str:
    """The SGLANG_SERVER_ARGS string for prepare_env.sh: shell-quoted flags, hyphenated."""
    return shlex.join(server_flags(cfg))


def container_name(port: int) -> str:
    return f"soarlab-sglang-{port}"


def build_command(cfg, model_dir: Path, host: str, port: int) -> list[str]:
    """The launch command for engine.launcher (python | docker)."""
    launcher = str(opt(cfg, "engine.launcher", "python"))
    flags = server_flags(cfg)
    if launcher == "python":
        python = opt(cfg, "engine.python", None) or sys.executable
        return [str(python), "-m", "sglang.launch_server", "--model-path", str(model_dir),
                "--host", host, "--port", str(port), *flags]
    if launcher == "docker":
        inner_model = str(opt(cfg, "engine.container_model_dir", "/models/MiniCPM-SALA"))
        publish_host = "127.0.0.1" if host in ("127.0.0.1", "localhost") else host
        return [
            "docker", "run", "--rm", "--name", container_name(port),
            "--gpus", str(opt(cfg, "engine.docker_gpus", "all")),
            "--shm-size", str(opt(cfg, "engine.docker_shm_size", "16g")),
            "-p", f"{publish_host}:{port}:{port}",
            "-v", f"{Path(model_dir).resolve()}:{inner_model}:ro",
            *jit_docker_args(cfg),
            *[str(a) for a in (opt(cfg, "engine.docker_args", None) or [])],
            str(opt(cfg, "engine.image", "ghcr.io/openbmb/soar-toolkit:latest")),
            "python", "-m", "sglang.launch_server", "--model-path", inner_model,
            "--host", "0.0.0.0", "--port", str(port), *flags,
        ]
    raise SoarError(f"unknown engine.launcher {launcher!r}", "use engine.launcher=python or engine.launcher=docker")


def jit_docker_args(cfg) -> list[str]:
    """Mount engine.jit_cache_dir into the container and point the JIT caches there."""
    env = jit_cache_env(cfg, CONTAINER_JIT_DIR)
    if not env:
        return []
    host_dir = Path(str(cfg.engine.jit_cache_dir)).expanduser()
    return ["-v", f"{host_dir}:{CONTAINER_JIT_DIR}", *[a for k, v in env.items() for a in ("-e", f"{k}={v}")]]


def served_model_name(cfg, model_dir: Path) -> str:
    name = None
    for key, value in (opt(cfg, "engine.server_args", None) or {}).items():
        if flag_name(key) == "served-model-name" and value not in (None, False, True):
            name = str(value)
    if name:
        return name
    if str(opt(cfg, "engine.launcher", "python")) == "docker":
        return str(opt(cfg, "engine.container_model_dir", "/models/MiniCPM-SALA"))
    return str(model_dir)


def preflight(cfg) -> None:
    """Fail early, with the fix, where SGLang cannot start on this machine."""
    launcher = str(opt(cfg, "engine.launcher", "python"))
    if launcher == "python" and not opt(cfg, "engine.python", None):
        if importlib.util.find_spec("sglang") is None:
            raise SoarError(
                "sglang is not installed in this Python (it needs an NVIDIA GPU)",
                "on a GPU machine `pip install 'soarlab[gpu]'`, or engine.launcher=docker, "
                "or engine=transformers on CPU; `soarlab doctor` shows what this machine has",
            )
    elif launcher == "docker":
        if shutil.which("docker") is None:
            raise SoarError("docker is not installed", "install Docker with the NVIDIA container toolkit, or engine.launcher=python")
        try:
            ok = subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:
            raise SoarError("no Docker engine answers `docker info`", "start the Docker daemon, or engine.launcher=python")


@contextlib.contextmanager
def open_sglang(cfg, model_dir: Path, log_path: Path) -> Iterator[Server]:
    model_dir = Path(model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise SoarError(f"model directory {model_dir} has no config.json", "run `soarlab stage fetch-model` (or quantize) first")
    preflight(cfg)
    ep = endpoint(cfg)
    check_port_free(ep.host, ep.port)
    docker = str(opt(cfg, "engine.launcher", "python")) == "docker"

    def docker_stop() -> None:
        subprocess.run(["docker", "stop", "-t", str(int(ep.stop_grace_s)), container_name(ep.port)],
                       capture_output=True, timeout=ep.stop_grace_s + 30)

    env = jit_cache_env(cfg)
    if cfg.engine.get("jit_cache_dir"):
        Path(str(cfg.engine.jit_cache_dir)).expanduser().mkdir(parents=True, exist_ok=True)
    with managed_server(
        build_command(cfg, model_dir, ep.host, ep.port), env=None if docker else env,
        base_url=ep.base_url, log_path=log_path, startup_timeout_s=ep.startup_timeout_s,
        stop_grace_s=ep.stop_grace_s, name="sglang server", extra_stop=docker_stop if docker else None,
    ):
        yield Server(
            base_url=ep.base_url, api="sglang", model=served_model_name(cfg, model_dir), supports_ignore_eos=True,
            has_flush_cache=True, request_timeout_s=ep.request_timeout_s, log_path=Path(log_path),
        )
