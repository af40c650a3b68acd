"""engine=sglang: `python -m sglang.launch_server` on a GPU machine (engine.launcher=python).

engine.launcher=container runs the GPU serving image instead (soarlab.engines.container).

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


def build_command(cfg, model_dir: Path, host: str, port: int) -> list[str]:
    """`python -m sglang.launch_server` on model_dir with the configured flags."""
    python = opt(cfg, "engine.python", None) or sys.executable
    return [str(python), "-m", "sglang.launch_server", "--model-path", str(model_dir),
            "--host", host, "--port", str(port), *server_flags(cfg)]


def served_model_name(cfg, model_dir: Path | str) -> str:
    """What SGLang serves the model as: --served-model-name if set, else the model path."""
    name = None
    for key, value in (opt(cfg, "engine.server_args", None) or {}).items():
        if flag_name(key) == "served-model-name" and value not in (None, False, True):
            name = str(value)
    return name or str(model_dir)


def preflight(cfg) -> None:
    """Fail early, with the fix, where SGLang cannot start on this machine."""
    if not opt(cfg, "engine.python", None) and importlib.util.find_spec("sglang") is None:
        raise SoarError(
            "sglang is not installed in this Python (it needs an NVIDIA GPU)",
            "on a GPU machine `pip install 'soarlab[gpu]'`, or engine.launcher=container, "
            "or engine=transformers on CPU; `soarlab doctor` shows what this machine has",
        )


@contextlib.contextmanager
def open_sglang(cfg, model_dir: Path, log_path: Path) -> Iterator[Server]:
    model_dir = Path(model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise SoarError(f"model directory {model_dir} has no config.json", "run `soarlab stage fetch-model` (or quantize) first")
    preflight(cfg)
    ep = endpoint(cfg)
    check_port_free(ep.host, ep.port)
    with managed_server(
        build_command(cfg, model_dir, ep.host, ep.port),
        base_url=ep.base_url, log_path=log_path, startup_timeout_s=ep.startup_timeout_s,
        stop_grace_s=ep.stop_grace_s, name="sglang server",
    ):
        yield Server(
            base_url=ep.base_url, api="sglang", model=served_model_name(cfg, model_dir), supports_ignore_eos=True,
            has_flush_cache=True, request_timeout_s=ep.request_timeout_s, log_path=Path(log_path),
        )
