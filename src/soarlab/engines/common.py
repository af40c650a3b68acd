"""What the engines that start a server share (its endpoint is the typed `engine` config itself)."""

from __future__ import annotations

from soarlab.schema import ServedEngine


def base_url(engine: ServedEngine, port: int) -> str:
    """The server's base URL on `port` (the port actually leased, which can differ from engine.port)."""
    host = "127.0.0.1" if engine.host in ("0.0.0.0", "") else engine.host
    return f"http://{host}:{port}"
