"""Config reading shared by the engines. Every key is in the composed config (soarlab.schema)."""

from __future__ import annotations

from dataclasses import dataclass

from soarlab.schema import SoarConfig



@dataclass
class Endpoint:
    host: str
    port: int
    startup_timeout_s: float
    stop_grace_s: float

    def on_port(self, port: int) -> str:
        """The base URL on `port` (the port actually leased, which can differ from the configured one)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{port}"


def endpoint(cfg: SoarConfig) -> Endpoint:
    """engine.host / port (0: any free port, chosen when the port is leased) / startup_timeout_s / stop_grace_s."""
    return Endpoint(
        host=cfg.engine.host,
        port=cfg.engine.port,
        startup_timeout_s=cfg.engine.startup_timeout_s,
        stop_grace_s=cfg.engine.stop_grace_s,
    )
