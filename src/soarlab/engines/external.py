"""engine=external: a server started elsewhere (a GPU box, the platform's image). Nothing is started or stopped."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from soarlab.engines.common import opt
from soarlab.engines.server import Server, is_healthy, served_models
from soarlab.errors import SoarError


@contextlib.contextmanager
def open_external(cfg, model_dir: Path, log_path: Path) -> Iterator[Server]:
    url = str(opt(cfg, "engine.url", "") or "").rstrip("/")
    api = str(opt(cfg, "engine.api", "sglang"))
    if not url:
        raise SoarError("engine=external needs engine.url", "set engine.url=http://HOST:PORT")
    if api not in ("sglang", "openai"):
        raise SoarError(f"engine.api={api!r} is not sglang or openai", "set engine.api=sglang or engine.api=openai")
    timeout = float(opt(cfg, "engine.health_timeout_s", 10))
    if not is_healthy(url, timeout=timeout):
        raise SoarError(
            f"server at {url} not reachable (GET /health and /v1/models did not answer 200)",
            "start it or set engine.url",
        )
    ignore_eos = opt(cfg, "engine.supports_ignore_eos", None)
    model = opt(cfg, "engine.model", None)
    if not model:
        models = served_models(url, timeout=timeout)
        model = models[0] if models else "default"
    yield Server(
        base_url=url, api=api, model=str(model),
        supports_ignore_eos=(api == "sglang") if ignore_eos is None else bool(ignore_eos),
        has_flush_cache=api == "sglang",
        request_timeout_s=float(opt(cfg, "engine.request_timeout_s", 600)),
        log_path=None,
    )
