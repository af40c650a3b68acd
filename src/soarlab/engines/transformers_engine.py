"""engine=transformers: `transformers serve` on CPU (the laptop/CI engine), OpenAI API."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterator

from soarlab.engines.common import endpoint, opt
from soarlab.engines.process import check_port_free, managed_server
from soarlab.engines.server import Server
from soarlab.errors import SoarError


def serve_flags(cfg) -> list[str]:
    """The `transformers serve` options from engine.* (all but the model, host and port)."""
    flags = ["--trust-remote-code"] if opt(cfg, "engine.trust_remote_code", True) else []
    flags += ["--device", str(opt(cfg, "engine.device", "cpu")), "--dtype", str(opt(cfg, "engine.dtype", "auto")),
              "--log-level", str(opt(cfg, "engine.log_level", "info"))]
    return flags + [str(a) for a in (opt(cfg, "engine.extra_args", None) or [])]


def build_command(cfg, model_dir: Path, host: str, port: int) -> list[str]:
    """The server command. Runs through soarlab.engines.transformers_serve (remote-code fix, see there)."""
    return [sys.executable, "-m", "soarlab.engines.transformers_serve", "serve", str(model_dir),
            "--host", host, "--port", str(port), *serve_flags(cfg)]


@contextlib.contextmanager
def open_transformers(cfg, model_dir: Path, log_path: Path) -> Iterator[Server]:
    model_dir = Path(model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise SoarError(f"model directory {model_dir} has no config.json", "run `soarlab stage fetch-model` (or quantize) first")
    ep = endpoint(cfg)
    check_port_free(ep.host, ep.port)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TOKENIZERS_PARALLELISM": "false"}
    with managed_server(
        build_command(cfg, model_dir, ep.host, ep.port),
        base_url=ep.base_url, log_path=log_path, startup_timeout_s=ep.startup_timeout_s,
        stop_grace_s=ep.stop_grace_s, env=env, name="transformers serve",
    ):
        yield Server(
            base_url=ep.base_url, api="openai", model=str(model_dir), supports_ignore_eos=False,
            has_flush_cache=False, request_timeout_s=ep.request_timeout_s, log_path=Path(log_path),
        )
