"""Config reading shared by the engines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from soarlab.engines.server import free_port


def opt(cfg, key: str, default: Any = None) -> Any:
    """A dotted config value or `default` when the key is absent (struct-mode safe)."""
    return OmegaConf.select(cfg, key, default=default)


@dataclass
class Endpoint:
    host: str
    port: int
    startup_timeout_s: float
    request_timeout_s: float
    stop_grace_s: float

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"


def endpoint(cfg) -> Endpoint:
    """engine.host / port (0: any free port) / startup_timeout_s / request_timeout_s / stop_grace_s."""
    host = str(opt(cfg, "engine.host", "127.0.0.1"))
    port = int(opt(cfg, "engine.port", 30000))
    if port == 0:
        port = free_port(host if host not in ("0.0.0.0", "") else "127.0.0.1")
    return Endpoint(
        host=host,
        port=port,
        startup_timeout_s=float(opt(cfg, "engine.startup_timeout_s", 300)),
        request_timeout_s=float(opt(cfg, "engine.request_timeout_s", 600)),
        stop_grace_s=float(opt(cfg, "engine.stop_grace_s", 15)),
    )
