"""Measure what issue 19 asks of `soarlab compare` (docs/PERFORMANCE.md, "Run-to-run noise"): the false
"faster" rate over identical-pair comparisons, with and without between-run noise in the interval.

Each pair is two identical configurations: loopback servers (soarlab.bench.loopback) with the same
per-token delay, each run from a fresh server, all three levels with the tiny default's repeats,
the machine's own drift between runs (nothing injected). Runs are made as `--rerun` makes them,
interleaved A B A B. Each pair is judged by soarlab.decide.compare three ways:
- within-run only: one run per side, the interval from its repeats (what compare did before);
- noise record: one run per side, the between-run CV pooled from the other pairs' runs;
- reruns: all runs per side, run means as samples (`compare A B --rerun N`).

    .venv/bin/python scripts/bench/bench_compare_noise.py [--pairs 10] [--reruns 3] [--delay-s 0.003]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def one_run(delay_s: float, requests, bench) -> dict:
    """A fresh server, the three levels: (metrics, per-level repeat durations) as MLflow holds them."""
    from soarlab.bench.loopback import LoopbackServer
    from soarlab.bench.runner import run_level
    from soarlab.engines.server import Server

    metrics, repeats = {}, {}
    with LoopbackServer(token_delay_s=delay_s) as srv:
        server = Server(srv.base_url, "sglang", model="loopback")
        for level, concurrency in bench.levels.items():
            report, _ = run_level(server, requests, level, concurrency, bench)
            assert report.valid, report.invalid_reasons
            metrics |= {f"bench.{level}_valid": 1.0, f"bench.{level}_duration_s": report.duration_s}
            repeats[level] = list(report.durations_s)
    return {"metrics": metrics, "repeats": repeats}


def record(name: str, config: str, run: dict):
    from soarlab.tracking.runs import RunRecord

    tags = {"soarlab.model": "loopback", "soarlab.speed_set_sha": "tiny", "soarlab.machine": "this"}
    return RunRecord(name, name, 0, tags, {"config": config}, run["metrics"], run["repeats"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--reruns", type=int, default=3)
    p.add_argument("--delay-s", type=float, default=0.003)
    args = p.parse_args()

    from support import bench_cfg

    from soarlab.bench.requests import BenchRequest
    from soarlab.config import compose
    from soarlab.decide.compare import level_difference
    from soarlab.prediction.noise import noise_record
    from soarlab.domain import LEVELS

    cfg = compose()
    bench = bench_cfg(repeats=int(cfg.bench.repeats))  # conf/bench/tiny.yaml: its repeats, flush, warm-up
    rng = random.Random(1)
    requests = [BenchRequest(index=i, line=i + 1, prompt="word " * 40, prompt_len=41, output_len=rng.randint(8, 24))
                for i in range(int(bench.dataset.num_requests))]
    pairs = []
    for pair in range(args.pairs):
        sides = {"A": [], "B": []}
        for i in range(args.reruns):
            for side in sides:  # interleaved, as --rerun runs them
                sides[side].append(record(f"p{pair}{side}{i}", f"p{pair}{side}", one_run(args.delay_s, requests, bench)))
        pairs.append(sides)
        print(f"pair {pair + 1}/{args.pairs} done", file=sys.stderr, flush=True)

    confidence, floor = float(cfg.decide.confidence), float(cfg.decide.compare.negligible_pct)
    ways = {"within-run only (one run per side)": lambda k, s: ([s["A"][0]], [s["B"][0]], None),
            "noise record (one run per side)": lambda k, s: ([s["A"][0]], [s["B"][0]], noise_record(
                [r for j, o in enumerate(pairs) if j != k for r in o["A"] + o["B"]], "this", [])),
            f"reruns (--rerun {args.reruns})": lambda k, s: (s["A"], s["B"], None)}
    print(f"{args.pairs} identical pairs, {bench.repeats} repeats per run, {args.reruns} runs per side, "
          f"per-token delay {args.delay_s * 1000:g} ms, confidence {confidence:.0%}, negligible_pct {floor:g}")
    print("| interval from | false \"faster\" (any level) | false \"faster\" or \"slower\" (any level) | per level: not within noise |")
    print("|---|---|---|---|")
    for label, pick in ways.items():
        verdicts = []
        for k, sides in enumerate(pairs):
            a, b, rec = pick(k, sides)
            verdicts.append([level_difference(a, b, L, confidence, floor, rec).verdict for L in LEVELS])
        faster = sum("faster" in v for v in verdicts)
        either = sum(bool({"faster", "slower"} & set(v)) for v in verdicts)
        per_level = ", ".join(f"{L} {sum(v[i] != 'within noise' for v in verdicts)}" for i, L in enumerate(LEVELS))
        print(f"| {label} | {faster}/{len(pairs)} | {either}/{len(pairs)} | {per_level} |")
    cvs = noise_record([r for s in pairs for r in s["A"] + s["B"]], "this", [])
    print(cvs.describe() if cvs else "no noise record")
    within = [statistics.stdev(r.repeats["S1"]) / statistics.fmean(r.repeats["S1"]) for s in pairs for r in s["A"] + s["B"]]
    print(f"median within-run CV of S1 repeats: {statistics.median(within):.2%}")


if __name__ == "__main__":
    main()
