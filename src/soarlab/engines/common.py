"""Config reading shared by the engines. Every key is in the composed config (soarlab.schema)."""

from __future__ import annotations

from dataclasses import dataclass

from soarlab.engines.server import free_port


@dataclass
class Endpoint:
    host: str
    port: int
    startup_timeout_s: float
    stop_grace_s: float

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"


def endpoint(cfg) -> Endpoint:
    """engine.host / port (0: any free port) / startup_timeout_s / stop_grace_s."""
    host = str(cfg.engine.host)
    port = int(cfg.engine.port)
    if port == 0:
        port = free_port(host if host not in ("0.0.0.0", "") else "127.0.0.1")
    return Endpoint(
        host=host,
        port=port,
        startup_timeout_s=float(cfg.engine.startup_timeout_s),
        stop_grace_s=float(cfg.engine.stop_grace_s),
    )
