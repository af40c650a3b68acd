"""Start, health-check, log and stop an inference server, whatever engine serves it.

    from soarlab.engines import open_engine, Server

    with open_engine(cfg, model_dir, log_path) as server:   # cfg: the full composed config
        ...  # server.base_url, server.api ("sglang" | "openai"), server.model, server.supports_ignore_eos

The type of `cfg.engine` (soarlab.schema's engine union, tagged by `engine.name`) picks the
engine: `transformers` (CPU, `transformers serve`), `sglang` (GPU: `python -m sglang.launch_server`),
`external` (a server someone else started; nothing is started or stopped). `engine.launcher=container`
runs transformers or sglang inside the serving image instead, on the original model
(paths.base_model), as the platform does. A started server runs in its own process group with its
output in `log_path`, and is always stopped when the block exits (also on errors, Ctrl-C and
SIGTERM); it dies with this process even on SIGKILL (process.py).
Its port is leased (port_lease.py): a taken `engine.port` gives a free one, said on stderr.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

from soarlab.engines.server import Server
from soarlab.schema import ExternalEngine, SGLangEngine, SoarConfig

__all__ = ["Server", "open_engine"]


@contextlib.contextmanager
def open_engine(cfg: SoarConfig, model_dir: str | Path, log_path: str | Path) -> Iterator[Server]:
    """Start the engine `cfg.engine` configures on `model_dir`; yield a ready `Server`; stop it."""
    engine = cfg.engine
    t0 = time.monotonic()
    if isinstance(engine, ExternalEngine):  # started elsewhere: its start is not ours to time
        from soarlab.engines.external import open_external

        with open_external(engine) as server:
            yield server
        return
    if engine.launcher == "container":  # the serving image runs the original model (paths.base_model)
        from soarlab.engines.containerized import open_container

        opened = open_container(cfg, Path(log_path))
    elif isinstance(engine, SGLangEngine):
        from soarlab.engines.sglang import open_sglang

        opened = open_sglang(cfg, Path(model_dir), Path(log_path))
    else:
        from soarlab.engines.transformers_engine import open_transformers

        opened = open_transformers(cfg, Path(model_dir), Path(log_path))
    with opened as server:
        _say_ready(engine.name + (" (container)" if engine.launcher == "container" else ""), t0, server)
        yield server


def _say_ready(name: str, t0: float, server: Server) -> None:
    """A start takes minutes on a GPU (imports, CUDA graphs, JIT): say how long, in the stage's log."""
    print(f"{name} server ready in {time.monotonic() - t0:.1f} s at {server.base_url}", flush=True)
