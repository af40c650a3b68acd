"""Speculative decoding on the CPU engine (docs/PERFORMANCE.md, "Speculative decoding (tiny default, CPU)"): the
tiny default with spec=none against each CPU method, per level, side by side in one run.

Each round starts one server per method, in turn (none, standalone, ngram, then again), on the pipeline's
own quantized model and speed set, and runs the three levels the official way (soarlab.bench.runner, the
config's repeats). Reported per method: the median duration of each level over the rounds, its ratio to
spec=none, the tokens per verification and the share of drafted tokens accepted.

    dvc repro                                   # models/quantized and data/speed.jsonl, as a user has them
    .venv/bin/python scripts/bench/bench_spec.py [--rounds 3] [--methods none standalone ngram]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one_server(method: str, draft: Path, requests, info, tokenizer) -> dict[str, dict]:
    """{level: {duration_s, accept_length, accept_rate}} of one server start with spec=`method`."""
    from soarlab.bench.runner import run_level
    from soarlab.config import compose
    from soarlab.engines import open_engine

    cfg = compose([f"spec={method}", f"paths.draft_model={draft}", "engine.port=0", "bench.progress=false"], root=ROOT)
    out = {}
    with tempfile.TemporaryDirectory() as logs, open_engine(cfg, ROOT / cfg.paths.quantized_model,
                                                            Path(logs) / "server.log") as server:
        for level, concurrency in cfg.bench.levels.items():
            report, _ = run_level(server, requests, level, concurrency, cfg.bench, tokenizer, info)
            assert report.valid, f"{method} {level}: {report.invalid_reasons}"
            spec = report.server_metrics.get("spec") or {}
            out[level] = {"duration_s": report.duration_s, "accept_length": spec.get("accept_length"),
                          "accept_rate": spec.get("accept_rate")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=["none", "standalone", "ngram"])
    args = parser.parse_args()

    from soarlab.bench.preflight import prepare
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer
    from soarlab.tiny import DRAFT_DIR, install_tiny_model

    cfg = compose([], root=ROOT)
    tokenizer = load_tokenizer(str(ROOT / cfg.paths.quantized_model))
    requests, info = prepare(ROOT / cfg.paths.data / "speed.jsonl", tokenizer, cfg.bench)
    results: dict[str, list[dict]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory() as tmp:
        draft = install_tiny_model(Path(tmp) / "draft", DRAFT_DIR)
        for round_ in range(args.rounds):
            for method in args.methods:
                results[method].append(one_server(method, draft, requests, info, tokenizer))
                print(f"round {round_ + 1}: {method} done", flush=True)
    levels = list(cfg.bench.levels)
    median = {m: {lvl: statistics.median(r[lvl]["duration_s"] for r in runs) for lvl in levels} for m, runs in results.items()}
    print("| spec | " + " | ".join(f"{lvl} s (x none)" for lvl in levels) + " | tokens per verification | drafted tokens accepted |")
    print("|---|" + "---|" * (len(levels) + 2))
    for method, runs in results.items():
        cells = [f"{median[method][lvl]:.2f} ({median['none'][lvl] / median[method][lvl]:.2f}x)" if "none" in median
                 else f"{median[method][lvl]:.2f}" for lvl in levels]
        accept = [statistics.median(r[lvl]["accept_length"] for r in runs) if runs[0][lvl]["accept_length"] else None
                  for lvl in levels]
        rate = [statistics.median(r[lvl]["accept_rate"] for r in runs) if runs[0][lvl]["accept_rate"] is not None else None
                for lvl in levels]
        fmt = lambda xs, f: "/".join("-" if x is None else f.format(x) for x in xs)  # noqa: E731
        print(f"| {method} | " + " | ".join(cells) + f" | {fmt(accept, '{:.2f}')} | {fmt(rate, '{:.0%}')} |")


if __name__ == "__main__":
    main()
