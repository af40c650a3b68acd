"""Stage `bench`: start the engine on the quantized model and run S1, S8, Smax the official way (RULES.md 2).

Reads data/speed.jsonl (written by fetch-data with soarlab.datasets.speed.make_speed_set) and
writes reports/bench/ as a whole: <level>.json, <level>.requests.jsonl, metrics.json, bench.png.
The engine's log goes to reports/logs/bench-server.log, outside the atomic output, so that a
server that fails to start leaves its log behind.
"""

from __future__ import annotations

from pathlib import Path

from soarlab.errors import SoarError, shorten
from soarlab.paths import BENCH_DIR, LOGS_DIR, METRICS_FILE, PRUNED_FILE, SPEED_SET_FILE
from soarlab.schema import SoarConfig


def check_inputs(cfg: SoarConfig) -> tuple[Path, Path]:
    """(speed set, quantized model dir), or a SoarError naming the stage to run first."""
    dataset = Path(cfg.paths.data) / SPEED_SET_FILE
    model_dir = Path(cfg.paths.quantized_model)
    if not dataset.is_file():
        raise SoarError(f"{dataset} not found", "run the fetch-data stage first (dvc repro fetch-data)")
    if not model_dir.is_dir():
        raise SoarError(f"{model_dir} not found", "run the quantize stage first (dvc repro quantize)")
    return dataset, model_dir


def run(cfg: SoarConfig, server=None, checkpoints=None) -> None:
    """`server`: one already serving the quantized model (stage `evaluate`); None starts one.
    `checkpoints` (a pruning sweep's, soarlab.pruning.checkpoints): S1 is reported after its first part
    and the level stops when the trial is pruned; reports/bench then holds what write_pruned writes."""
    import contextlib

    from soarlab.atomic import atomic_dir
    from soarlab.bench.preflight import prepare
    from soarlab.bench.report import server_metrics_lines, write_level, write_summary
    from soarlab.bench.runner import run_level
    from soarlab.datasets.speed import load_tokenizer
    from soarlab.engines import open_engine
    from soarlab.pruning import Pruned

    bench = cfg.bench
    dataset, model_dir = check_inputs(cfg)
    tokenizer = load_tokenizer(str(model_dir))
    requests, info = prepare(dataset, tokenizer, bench)
    out = Path(cfg.paths.reports) / BENCH_DIR
    said: set[str] = set()  # what could not be sampled, said once for the run (server_metrics_lines)
    with atomic_dir(out) as tmp:
        try:
            with contextlib.nullcontext(server) if server else \
                    open_engine(cfg, model_dir, Path(cfg.paths.reports) / LOGS_DIR / "bench-server.log") as server:
                for level, concurrency in bench.levels.items():
                    with server.death_reported(f"bench level {level}"):
                        report, rows = run_level(server, requests, level, concurrency, bench, tokenizer, info,
                                                 on_request=checkpoints.on_request if checkpoints else None)
                    write_level(tmp, report, rows)
                    state = f"{report.duration_s:.2f} s" if report.valid else \
                        "INVALID: " + shorten(" | ".join(report.invalid_reasons), 120, f"reports/bench/{level}.json")
                    print(f"bench {level}: {state}")
                    for line in server_metrics_lines(report, said):
                        print(f"bench {line}")
                    if checkpoints:
                        checkpoints.after_level(level)
        except Pruned as pruned:  # its partial figures are what the report keeps
            write_pruned(tmp, pruned)
            return
        write_summary(tmp, list(bench.levels), make_plot=bench.plot)


def write_pruned(folder: Path, pruned) -> None:
    """reports/bench of a pruned trial: pruned.json (step, reason, partial figures) and a metrics.json
    that score reads as "pruned, not scored"."""
    from soarlab.atomic import write_json

    write_json(folder / PRUNED_FILE, pruned.record())
    write_json(folder / METRICS_FILE, {"pruned": 1, "pruned_step": pruned.step})
    print(f"evaluate: pruned at step {pruned.step} ({pruned.what}): {pruned.reason}")
