"""score, eval-score, bench, make-speed-set, check-checkpoint: one measurement, outside the pipeline."""

from __future__ import annotations

import json
import sys

from soarlab.domain import LEVELS


def add_parsers(sub) -> None:
    p = sub.add_parser("score", help="final score from durations and raw accuracy (RULES.md 1)")
    p.add_argument("--durations", required=True, help="your durations in s: S1=..,S8=..,Smax=..")
    p.add_argument("--best", required=True, help="best durations in s: S1=..,S8=..,Smax=..")
    p.add_argument("--ori-accuracy", required=True, type=float, help="raw accuracy in percent")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the score config, e.g. score=soar2026")
    p.set_defaults(run=score_cli)

    p = sub.add_parser("eval-score", help="score correctness predictions made elsewhere (RULES.md 3)")
    p.add_argument("--dataset", required=True, help="SOAR-format correctness set (JSONL)")
    p.add_argument("--predictions", required=True, help="JSONL, one object with 'prediction' per dataset line")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. score=soar2026")
    p.set_defaults(run=eval_score_cli)

    p = sub.add_parser("bench", help="benchmark one level against a running server (RULES.md 2)")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--dataset", required=True, help="SOAR-format speed set (JSONL)")
    p.add_argument("--level", required=True, choices=LEVELS)
    p.add_argument("--tokenizer", help="model dir or tokenizer for output lengths (default: asked of the server)")
    p.add_argument("--api", choices=("auto", "sglang", "openai"), default="auto")
    p.add_argument("--output-dir", help="where the level's files go (default: paths.reports/bench)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the bench config, e.g. bench.repeats=3")
    p.set_defaults(run=bench_cli)

    p = sub.add_parser("make-speed-set", help="write a SOAR-format speed set with token-exact lengths")
    p.add_argument("--profile", required=True, help="0.1k-4k, 0.1k-0.5k, 60k-0.5k, long-mix, ...")
    p.add_argument("--tokenizer", required=True, help="model dir whose tokenizer defines the lengths")
    p.add_argument("--num-requests", type=int, required=True)
    p.add_argument("--seed", type=int, help="the rows' random seed (default: bench.dataset.seed)")
    p.add_argument("--output", required=True)
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. bench=soar (where the profiles come from)")
    p.set_defaults(run=make_speed_set_cli)

    p = sub.add_parser("check-checkpoint", help="validate a quantized checkpoint against RULES.md 7")
    p.add_argument("dir")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=gptq_w8 (its quant.exclude is checked)")
    p.set_defaults(run=check_checkpoint_cli)


def score_cli(args) -> int:
    """`soarlab score --durations .. --best .. --ori-accuracy X [overrides]`: print the score as one JSON object."""
    from soarlab.config import compose_official
    from soarlab.final_score import final_score, parse_levels

    cfg = compose_official(args.overrides)
    result = final_score(
        parse_levels(args.durations), parse_levels(args.best), args.ori_accuracy, cfg.model.baseline_accuracy, cfg.score
    )
    print(json.dumps(result))
    return 0


def eval_score_cli(args) -> int:
    """`soarlab eval-score --dataset FILE --predictions FILE [overrides]`: print one JSON object."""
    from soarlab.accuracy.grading import score_files
    from soarlab.config import compose_official

    cfg = compose_official(args.overrides)
    print(json.dumps(score_files(args.dataset, args.predictions, cfg)))
    return 0


def bench_cli(args) -> int:
    """`soarlab bench --url URL --dataset FILE --level S1|S8|Smax`: one level against any running server.
    Exit 0 when the level is valid, 1 when not."""
    from pathlib import Path

    from soarlab.bench.preflight import prepare, probe_api, reachable, server_model
    from soarlab.bench.report import print_level, write_level, write_summary
    from soarlab.bench.runner import run_level
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer
    from soarlab.engines.server import Server
    from soarlab.errors import SoarError
    from soarlab.paths import BENCH_DIR

    cfg = compose(args.overrides)
    bench, output_dir = cfg.bench, args.output_dir or str(Path(cfg.paths.reports) / BENCH_DIR)
    base_url = args.url.rstrip("/")
    if not reachable(base_url, bench.connect_timeout_s):
        raise SoarError(f"no server answers at {base_url} within {bench.connect_timeout_s:g} s (bench.connect_timeout_s)",
                        "start the server first, or fix --url")
    probe_s = bench.connect_timeout_s
    api = probe_api(base_url, probe_s) if args.api == "auto" else args.api
    named = server_model(base_url, api, probe_s)
    tok_name = args.tokenizer or named
    if not tok_name:
        raise SoarError("the server does not name its tokenizer", "pass --tokenizer MODEL_DIR")
    tokenizer = load_tokenizer(tok_name)
    if args.level not in bench.levels:
        raise SoarError(f"level {args.level} is not in bench.levels", f"use one of {', '.join(bench.levels)}")
    requests, info = prepare(args.dataset, tokenizer, bench)
    model = bench.model or (named if api == "openai" else None)
    server = Server(base_url, api, model=model)
    report, rows = run_level(server, requests, args.level, bench.levels[args.level], bench, tokenizer, info)
    write_level(output_dir, report, rows)
    write_summary(output_dir, make_plot=bench.plot)
    print_level(report, output_dir)
    return 0 if report.valid else 1


def make_speed_set_cli(args) -> int:
    """`soarlab make-speed-set --profile P --tokenizer DIR --num-requests N --seed S --output FILE [overrides]`."""
    from soarlab.atomic import write_jsonl
    from soarlab.config import compose
    from soarlab.datasets.speed import load_tokenizer, make_speed_set, named_profile

    bench = compose(args.overrides).bench
    profile = named_profile(bench.profiles, args.profile)
    tokenizer = load_tokenizer(args.tokenizer)
    seed = bench.dataset.seed if args.seed is None else args.seed
    rows = make_speed_set(tokenizer, profile, args.num_requests, seed, progress=True)
    write_jsonl(args.output, rows)
    n_in = sum(len(tokenizer.encode(r["question"])) for r in rows)
    n_out = sum(len(tokenizer.encode(r["model_response"])) for r in rows)
    print(f"wrote {len(rows)} requests to {args.output}: {n_in} input tokens, {n_out} output tokens")
    return 0


def check_checkpoint_cli(args) -> int:
    """`soarlab check-checkpoint DIR [overrides]`: exit 0 when DIR passes the RULES.md 7 checks, 1 when not."""
    from soarlab.config import compose
    from soarlab.quant.check import check_checkpoint

    problems = check_checkpoint(args.dir, compose(args.overrides).quant.exclude)
    if problems:
        for p in problems:
            print(f"problem: {p}")
        print(f"{args.dir}: {len(problems)} problem(s); not ready to serve", file=sys.stderr)
        return 1
    print(f"{args.dir}: ok (RULES.md 7 checks passed)")
    return 0
