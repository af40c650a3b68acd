"""Config reading shared by the engines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from soarlab.errors import SoarError


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

    def on_port(self, port: int) -> str:
        """The base URL on `port` (the port actually leased, which can differ from the configured one)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{port}"


def _number(cfg, key: str, default, kind=float, low=0, high=None):
    """A config value as `kind` within [low, high], else a SoarError naming the key.
    (A minimal runtime check; the typed config schema validates the same at compose time.)"""
    value = opt(cfg, key, default)
    try:
        number = kind(value)
        if kind is int and (isinstance(value, bool) or number != float(value)):
            raise ValueError
    except (TypeError, ValueError):
        raise SoarError(f"{key}={value!r} is not a{'n integer' if kind is int else ' number'}",
                        f"set {key} to a number, e.g. {key}={default}") from None
    if number < low or (high is not None and number > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise SoarError(f"{key}={value!r} is out of range ({bounds})", f"set {key} within {bounds}, e.g. {key}={default}")
    return number


def endpoint(cfg) -> Endpoint:
    """engine.host / port (0: any free port, chosen when the port is leased) / startup_timeout_s /
    request_timeout_s / stop_grace_s, each checked."""
    return Endpoint(
        host=str(opt(cfg, "engine.host", "127.0.0.1")),
        port=_number(cfg, "engine.port", 30000, kind=int, high=65535),
        startup_timeout_s=_number(cfg, "engine.startup_timeout_s", 300),
        request_timeout_s=_number(cfg, "engine.request_timeout_s", 600),
        stop_grace_s=_number(cfg, "engine.stop_grace_s", 15),
    )
