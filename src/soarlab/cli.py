"""`soarlab` command line. Each subcommand's work lives in its own module, imported only when run,
so `soarlab --help` and light commands start without loading torch."""

from __future__ import annotations

import argparse
import importlib
import sys

from soarlab.errors import SoarError

STAGES = ("fetch-model", "fetch-data", "quantize", "package", "bench", "accuracy", "score", "track")


def _handler(target: str):
    """'module:function' -> a lazily imported callable taking the parsed args."""
    module, func = target.split(":")
    return lambda args: getattr(importlib.import_module(module), func)(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="soarlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("stage", help="run one pipeline stage with params.yaml (what dvc.yaml calls)")
    p.add_argument("name", choices=STAGES)
    p.add_argument("--params", default="params.yaml", help="config file the stage reads")
    p.set_defaults(run=_handler("soarlab.stages:run_stage_cli"))

    p = sub.add_parser("params", help="write params.yaml from the conf/ defaults (plus overrides)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=none engine.port=31000")
    p.add_argument("--output", default="params.yaml")
    p.set_defaults(run=_handler("soarlab.config:write_params_cli"))

    p = sub.add_parser("score", help="final score from durations and raw accuracy (RULES.md 1)")
    p.add_argument("--durations", required=True, help="your durations in s: S1=..,S8=..,Smax=..")
    p.add_argument("--best", required=True, help="best durations in s: S1=..,S8=..,Smax=..")
    p.add_argument("--ori-accuracy", required=True, type=float, help="raw accuracy in percent")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the score config, e.g. score=soar2026")
    p.set_defaults(run=_handler("soarlab.metrics.scoring:score_cli"))

    p = sub.add_parser("doctor", help="what this machine can run (GPU, Docker, SGLang, versions)")
    p.set_defaults(run=_handler("soarlab.doctor:doctor_cli"))

    p = sub.add_parser("eval-score", help="score correctness predictions made elsewhere (RULES.md 3)")
    p.add_argument("--dataset", required=True, help="SOAR-format correctness set (JSONL)")
    p.add_argument("--predictions", required=True, help="JSONL, one object with 'prediction' per dataset line")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. score=soar2026")
    p.set_defaults(run=_handler("soarlab.accuracy.scoring:eval_score_cli"))

    p = sub.add_parser("bench", help="benchmark one level against a running server (RULES.md 2)")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--dataset", required=True, help="SOAR-format speed set (JSONL)")
    p.add_argument("--level", required=True, choices=("S1", "S8", "Smax"))
    p.add_argument("--tokenizer", help="model dir or tokenizer for output lengths (default: asked of the server)")
    p.add_argument("--api", choices=("auto", "sglang", "openai"), default="auto")
    p.add_argument("--output-dir", default="reports/bench")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the bench config, e.g. bench.repeats=3")
    p.set_defaults(run=_handler("soarlab.bench.cli:bench_cli"))

    p = sub.add_parser("make-speed-set", help="write a SOAR-format speed set with token-exact lengths")
    p.add_argument("--profile", required=True, help="0.1k-4k, 0.1k-0.5k, 60k-0.5k, long-mix, ...")
    p.add_argument("--tokenizer", required=True, help="model dir whose tokenizer defines the lengths")
    p.add_argument("--num-requests", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output", required=True)
    p.set_defaults(run=_handler("soarlab.datasets.speed:make_speed_set_cli"))

    p = sub.add_parser("check-checkpoint", help="validate a quantized checkpoint against RULES.md 7")
    p.add_argument("dir")
    p.set_defaults(run=_handler("soarlab.quant.check:check_checkpoint_cli"))

    p = sub.add_parser("sweep", help="sweep the pipeline with Hydra multirun (each trial a DVC experiment)",
                       description="Hydra's command line: e.g. soarlab sweep quant=gptq_w4,gptq_w8 "
                                   "hydra/sweeper=optuna hydra/launcher=ray; --name NAME to name/resume it")
    p.add_argument("hydra_args", nargs=argparse.REMAINDER, help="Hydra overrides and options")
    p.set_defaults(run=_handler("soarlab.sweep.app:sweep_cli"))

    p = sub.add_parser("prepare-model", help="quantize a model dir (the submission's prepare_model.sh)")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=gptq_w4_mixed")
    p.set_defaults(run=_handler("soarlab.quant.prepare:prepare_model_cli"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:  # Hydra parses the rest (its options start with '-', which argparse would take)
        args = argparse.Namespace(run=_handler("soarlab.sweep.app:sweep_cli"), hydra_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except SoarError as exc:
        print(f"soarlab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("soarlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
