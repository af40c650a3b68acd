"""Start, health-check, log and stop an inference server, whatever engine serves it.

    from soarlab.engines import open_engine, Server

    with open_engine(cfg, model_dir, log_path) as server:   # cfg: the full composed config
        ...  # server.base_url, server.api ("sglang" | "openai"), server.model, server.supports_ignore_eos

`cfg.engine.name` picks the engine: `transformers` (CPU, `transformers serve`), `sglang`
(GPU: `python -m sglang.launch_server`), `external` (a server someone else started; nothing is
started or stopped). `engine.launcher=container` runs transformers or sglang inside the serving
image instead, on the original model (paths.base_model), as the platform does. A started server runs in its own
process group with its output in `log_path`, and is always stopped when the block exits
(also on errors, Ctrl-C and SIGTERM); it dies with this process even on SIGKILL (process.py).
Its port is leased (lease.py): a taken `engine.port` gives a free one, said on stderr.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

from soarlab.engines.server import Server
from soarlab.errors import SoarError

ENGINES = ("transformers", "sglang", "external")
LAUNCHERS = ("local", "container")

__all__ = ["ENGINES", "Server", "open_engine"]


@contextlib.contextmanager
def open_engine(cfg, model_dir: str | Path, log_path: str | Path) -> Iterator[Server]:
    """Start the engine named by `cfg.engine.name` on `model_dir`; yield a ready `Server`; stop it."""
    name = cfg.engine.name
    t0 = time.monotonic()
    if cfg.engine.get("launcher") == "container":  # external has no launcher
        from soarlab.engines.container import open_container

        with open_container(cfg, Path(log_path)) as server:
            _say_ready(f"{name} (container)", t0, server)
            yield server
        return
    if name == "transformers":
        from soarlab.engines.transformers_engine import open_transformers as opener
    elif name == "sglang":
        from soarlab.engines.sglang import open_sglang as opener
    elif name == "external":
        from soarlab.engines.external import open_external as opener
    else:
        raise SoarError(f"unknown engine.name {name!r}", f"use one of {', '.join(ENGINES)} (engine=transformers, ...)")
    with opener(cfg, Path(model_dir), Path(log_path)) as server:
        if name != "external":  # started elsewhere: its start is not ours to time
            _say_ready(name, t0, server)
        yield server


def _say_ready(name: str, t0: float, server: Server) -> None:
    """A start takes minutes on a GPU (imports, CUDA graphs, JIT): say how long, in the stage's log."""
    print(f"{name} server ready in {time.monotonic() - t0:.1f} s at {server.base_url}", flush=True)
