"""Stage `evaluate`: one server for the correctness evaluation, then the speed benchmark.

Both need the quantized model served with the same engine config, and on a GPU a start costs 71-132 s
(plus ~300 s of gptq_marlin JIT the first time), so they share one: `accuracy` (reports/accuracy/)
runs first and `bench` (reports/bench/) after it, with its cache flushes and warm-up, on the same
server, which stops when both are done or either fails. After bench, accuracy adds the official pass's time at
the measured speed and asks a sample of its questions again on the loaded server (stages/accuracy.after_bench). Accuracy comes first because it rules a
trial out soonest in a pruning sweep (soarlab.pruning; docs/ARCHITECTURE.md, "Pruning"): there,
its result and S1's first requests are reported, and a pruned trial's server stops at once.
`soarlab stage bench` / `soarlab stage accuracy` still run one alone.
"""

from __future__ import annotations

from pathlib import Path

from soarlab.paths import BENCH_DIR, LOGS_DIR
from soarlab.schema import SoarConfig
from soarlab.stages import accuracy, bench


def run(cfg: SoarConfig) -> None:
    from soarlab.atomic import atomic_dir
    from soarlab.engines import open_engine
    from soarlab.pruning import Pruned
    from soarlab.pruning.checkpoints import Checkpoints

    bench.check_inputs(cfg)
    checkpoints = Checkpoints.from_env()
    model_dir = Path(cfg.paths.quantized_model)
    pruned = None
    with open_engine(cfg, model_dir, Path(cfg.paths.reports) / LOGS_DIR / "evaluate-server.log") as server:
        with server.death_reported("accuracy"):
            summary = accuracy.run(cfg, server)
        try:
            checkpoints.accuracy(summary)
        except Pruned as exc:
            pruned = exc
        else:
            bench.run(cfg, server, checkpoints)
            accuracy.after_bench(cfg, server)  # the official pass's time at this speed; the answers after load
    if pruned is not None:  # the server has stopped: the bench levels are not run
        with atomic_dir(Path(cfg.paths.reports) / BENCH_DIR) as tmp:
            bench.write_pruned(tmp, pruned)
    checkpoints.end()
