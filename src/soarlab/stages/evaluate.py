"""Stage `evaluate`: one server for the speed benchmark, then the correctness evaluation.

Both need the quantized model served with the same engine config, and on a GPU a start costs 71-132 s
(plus ~300 s of gptq_marlin JIT the first time), so they share one: `bench` (reports/bench/) runs
first, with its cache flushes and warm-up, and `accuracy` (reports/accuracy/) after it, on the same
server, which stops when both are done or either fails. docs/ARCHITECTURE.md gives the trade-off
against two DVC stages. `soarlab stage bench` / `soarlab stage accuracy` still run one alone.
"""

from __future__ import annotations

from pathlib import Path

from soarlab.schema import SoarConfig
from soarlab.stages import accuracy, bench


def run(cfg: SoarConfig) -> None:
    from soarlab.engines import open_engine

    bench.check_inputs(cfg)
    model_dir = Path(cfg.paths.quantized_model)
    with open_engine(cfg, model_dir, Path(cfg.paths.reports) / "logs" / "evaluate-server.log") as server:
        bench.run(cfg, server)
        accuracy.run(cfg, server)
