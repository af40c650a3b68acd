"""engine=sglang: `python -m sglang.launch_server` on a GPU machine (engine.launcher=local).

engine.launcher=container runs the GPU serving image instead (soarlab.engines.containerized).

The server flags come from `engine.server_args` (flag name -> value; true = bare flag,
false/null = omitted) plus `--quantization` from `quant.serve_quantization`. The same code
renders SGLANG_SERVER_ARGS for the submission's prepare_env.sh (`server_flags`), so what
is benchmarked here is what the platform launches. Flags are always written with hyphens
(RULES.md 4): a key written with underscores is converted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator

from soarlab.engines.common import base_url
from soarlab.engines.process import managed_server, port_lease
from soarlab.engines.server import Server
from soarlab.errors import SoarError
from soarlab.hub import validate_model_dir
from soarlab.paths import owning_project_root
from soarlab.schema import SoarConfig

# Set by the launcher from engine.host / engine.port and the model directory, never by server_args.
RESERVED_FLAGS = ("model-path", "model", "host", "port")
SPECULATIVE_PREFIX = "speculative-"  # set from the spec group (soarlab.speculative), never by server_args
# SGLang's JIT compilers and the variable that moves each one's cache under engine.jit_cache_dir.
JIT_CACHE_VARS = {"TVM_FFI_CACHE_DIR": "tvm-ffi", "TRITON_CACHE_DIR": "triton", "FLASHINFER_WORKSPACE_BASE": "flashinfer",
                  "TORCHINDUCTOR_CACHE_DIR": "inductor"}
CONTAINER_JIT_DIR = "/soarlab-jit-cache"


def jit_cache_env(cfg: SoarConfig, base: str | None = None) -> dict[str, str]:
    """Environment that points the JIT caches at engine.jit_cache_dir (or `base`); {} when it is null."""
    configured = cfg.engine.jit_cache_dir
    if not configured:
        return {}
    root = base or str(Path(configured).expanduser())
    return {var: f"{root}/{sub}" for var, sub in JIT_CACHE_VARS.items()}


def flag_name(key: str) -> str:
    return str(key).strip().lstrip("-").replace("_", "-")


def server_flags(engine, serve_quantization: str | None) -> list[str]:
    """An SGLang engine config's `server_args` + the quant preset's `serve_quantization` as an argv list,
    flags hyphenated."""
    args = engine.server_args
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
        if name.startswith(SPECULATIVE_PREFIX):
            raise SoarError(
                f"engine.server_args sets --{name}: speculative decoding is the spec group's",
                "remove it and pick spec=standalone|ngram|eagle3 (its keys: spec.num_steps, spec.draft, ...)",
            )
        flags[name] = value
    quant = serve_quantization
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


def sglang_python(python: str | None) -> Path:
    """engine.python (SGLang's own environment; relative to the project that owns this checkout, also
    from DVC's temporary experiment copies, which hold no environments) or, when null, this interpreter."""
    if not python:
        return Path(sys.executable)
    path = Path(python).expanduser()
    return path if path.is_absolute() else owning_project_root() / path


def build_command(cfg: SoarConfig, model_dir: Path, host: str, port: int) -> list[str]:
    """`python -m sglang.launch_server` on model_dir with the configured flags and speculative decoding."""
    from soarlab import speculative

    flags = server_flags(cfg.engine, cfg.quant.serve_quantization)
    flags += speculative.server_flags(cfg.spec, Path(cfg.paths.draft_model).resolve())
    if cfg.engine.enable_metrics and "--enable-metrics" not in flags:
        flags.append("--enable-metrics")  # Prometheus /metrics for bench (soarlab.bench.server_metrics)
    return [str(sglang_python(cfg.engine.python)), "-m", "sglang.launch_server", "--model-path", str(model_dir),
            "--host", host, "--port", str(port), *flags]


def jit_container_args(cfg: SoarConfig) -> list[str]:
    """`run` options that mount engine.jit_cache_dir into a container and point its JIT caches there."""
    env = jit_cache_env(cfg, CONTAINER_JIT_DIR)
    if not env:
        return []
    host_dir = Path(cfg.engine.jit_cache_dir).expanduser()
    host_dir.mkdir(parents=True, exist_ok=True)
    return ["-v", f"{host_dir}:{CONTAINER_JIT_DIR}", *[a for k, v in env.items() for a in ("-e", f"{k}={v}")]]


def served_model_name(cfg: SoarConfig, model_dir: Path | str) -> str:
    """What SGLang serves the model as: --served-model-name if set, else the model path."""
    name = None
    for key, value in cfg.engine.server_args.items():
        if flag_name(key) == "served-model-name" and value not in (None, False, True):
            name = str(value)
    return name or str(model_dir)


def preflight(cfg: SoarConfig) -> None:
    """Fail early, with the fix, where SGLang cannot start on this machine."""
    if cfg.engine.python and not sglang_python(cfg.engine.python).is_file():
        raise SoarError(
            f"engine.python {sglang_python(cfg.engine.python)} does not exist (SGLang's own environment)",
            "on a GPU machine run `bash scripts/setup.sh --gpu`, or set engine.python to a Python with sglang; "
            "engine=transformers on CPU; `soarlab doctor` shows what this machine has",
        )
    if not cfg.engine.python and importlib.util.find_spec("sglang") is None:
        raise SoarError(
            "sglang is not installed in this Python (engine.python=null)",
            "set engine.python to SGLang's environment (`bash scripts/setup.sh --gpu` makes .venv-sglang), "
            "or engine.launcher=container, or engine=transformers on CPU",
        )


@contextlib.contextmanager
def open_sglang(cfg: SoarConfig, model_dir: Path, log_path: Path) -> Iterator[Server]:
    model_dir = validate_model_dir(Path(model_dir).resolve())
    preflight(cfg)
    ep = cfg.engine
    # A cache folder the caller already chose wins (a sweep trial's, per GPU: soarlab.sweep.gpu_lease).
    env = {var: path for var, path in jit_cache_env(cfg).items() if var not in os.environ}
    for path in env.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    with port_lease(ep.host, ep.port) as lease, managed_server(
        build_command(cfg, model_dir, ep.host, lease.port), env=env,
        base_url=base_url(ep, lease.port), log_path=log_path, startup_timeout_s=ep.startup_timeout_s,
        stop_grace_s=ep.stop_grace_s, name="sglang server", lease=lease,
    ) as proc:
        yield Server(
            base_url=base_url(ep, lease.port), api="sglang", model=served_model_name(cfg, model_dir),
            supports_ignore_eos=True, has_flush_cache=True, log_path=Path(log_path), process=proc,
        )
