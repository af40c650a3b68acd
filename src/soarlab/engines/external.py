"""engine=external: a server started elsewhere (a GPU box, the platform's image). Nothing is started or stopped."""

from __future__ import annotations

import contextlib
from typing import Iterator

from soarlab.engines.server import Server, is_healthy, served_models
from soarlab.errors import SoarError
from soarlab.schema import ExternalEngine


@contextlib.contextmanager
def open_external(engine: ExternalEngine) -> Iterator[Server]:
    url, api = engine.url.rstrip("/"), engine.api
    if not url:
        raise SoarError("engine=external needs engine.url", "set engine.url=http://HOST:PORT")
    timeout = engine.health_timeout_s
    if not is_healthy(url, timeout=timeout):
        raise SoarError(
            f"server at {url} not reachable (GET /health and /v1/models did not answer 200)",
            "start it or set engine.url",
        )
    ignore_eos = engine.supports_ignore_eos
    model = engine.model
    if not model:
        models = served_models(url, timeout=timeout)
        model = models[0] if models else "default"
    yield Server(
        base_url=url, api=api, model=model,
        supports_ignore_eos=(api == "sglang") if ignore_eos is None else ignore_eos,
        has_flush_cache=api == "sglang",
        log_path=None,
    )
