"""engine=transformers: `transformers serve` on CPU (the laptop/CI engine), OpenAI API."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterator

from soarlab.engines.common import base_url
from soarlab.engines.process import managed_server, port_lease
from soarlab.engines.server import Server
from soarlab.hub import validate_model_dir
from soarlab.schema import SoarConfig


def serve_flags(cfg: SoarConfig) -> list[str]:
    """The `transformers serve` options from engine.* (all but the model, host and port)."""
    engine = cfg.engine
    flags = ["--trust-remote-code"] if engine.trust_remote_code else []
    flags += ["--device", engine.device, "--dtype", engine.dtype, "--log-level", engine.log_level]
    return flags + engine.extra_args


def thread_env(cfg: SoarConfig) -> dict[str, str]:
    """torch's thread count in the server (engine.cpu_threads; none: torch's default, every core)."""
    threads = cfg.engine.cpu_threads
    return {} if threads is None else {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def build_command(cfg: SoarConfig, model_dir: Path, host: str, port: int) -> list[str]:
    """The server command. Runs through soarlab.engines.transformers_serve (remote-code fix, speculative
    decoding and FP8 weights, see there), which takes SGLang's `--speculative-*` flags and `--quantization fp8`."""
    from soarlab import speculative
    from soarlab.quant import fp8

    weights = list(fp8.FLAG) if cfg.quant.serve_quantization == fp8.FLAG[1] else []  # emulated on the CPU
    return [sys.executable, "-m", "soarlab.engines.transformers_serve", "serve", str(model_dir),
            "--host", host, "--port", str(port), *serve_flags(cfg), *weights,
            *speculative.server_flags(cfg.spec, Path(cfg.paths.draft_model).resolve())]


@contextlib.contextmanager
def open_transformers(cfg: SoarConfig, model_dir: Path, log_path: Path) -> Iterator[Server]:
    model_dir = validate_model_dir(Path(model_dir).resolve())
    ep = cfg.engine
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TOKENIZERS_PARALLELISM": "false", **thread_env(cfg)}
    with port_lease(ep.host, ep.port) as lease, managed_server(
        build_command(cfg, model_dir, ep.host, lease.port),
        base_url=base_url(ep, lease.port), log_path=log_path, startup_timeout_s=ep.startup_timeout_s,
        stop_grace_s=ep.stop_grace_s, env=env, name="transformers serve", lease=lease,
    ) as proc:
        yield Server(
            base_url=base_url(ep, lease.port), api="openai", model=str(model_dir), supports_ignore_eos=False,
            has_flush_cache=False, log_path=Path(log_path), process=proc,
        )
