"""`soarlab` command line. Each subcommand's work lives in its own module, imported only when run,
so `soarlab --help` and light commands start without loading torch."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from soarlab import stopping
from soarlab.domain import LEVELS
from soarlab.errors import error_line
from soarlab.names.environment import DEBUG_ENV

STAGES = ("check-params", "inputs", "fetch-model", "fetch-draft", "fetch-data", "quantize", "package", "evaluate", "bench", "accuracy", "reference", "score", "track")


def _handler(target: str):
    """'module:function' -> a lazily imported callable taking the parsed args."""
    module, func = target.split(":")
    return lambda args: getattr(importlib.import_module(module), func)(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="soarlab", description=__doc__)
    parser.add_argument("--debug", action="store_true", help=f"print the traceback of an error (or {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_pipeline_commands(sub)
    _add_measure_commands(sub)
    _add_decide_commands(sub)
    _add_sweep_command(sub)
    return parser


def _add_pipeline_commands(sub) -> None:
    """stage, params, doctor, base-image, prepare-model: the pipeline, its config and this machine."""
    p = sub.add_parser("stage", help="run one pipeline stage with params.yaml (what dvc.yaml calls)")
    p.add_argument("name", choices=STAGES)
    p.add_argument("--params", default="params.yaml", help="config file the stage reads")
    p.set_defaults(run=_handler("soarlab.stages:run_stage_cli"))

    p = sub.add_parser("params", help="write params.yaml from the conf/ defaults (plus overrides)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=none engine.port=31000")
    p.add_argument("--output", default="params.yaml")
    p.set_defaults(run=_handler("soarlab.config:write_params_cli"))

    p = sub.add_parser("doctor", help="what this machine can run (GPU, Docker/Podman, SGLang, versions) and what killed runs left")
    p.set_defaults(run=_handler("soarlab.doctor:doctor_cli"))

    p = sub.add_parser("base-image", help="make the CPU serving image's Debian base with mmdebstrap (if missing)")
    p.add_argument("--force", action="store_true", help="make it again even if it exists")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. package.cpu_image.suite=trixie")
    p.set_defaults(run=_handler("soarlab.container:base_image_cli"))

    p = sub.add_parser("prepare-model", help="quantize a model dir (the submission's prepare_model.sh)")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=gptq_w4_mixed")
    p.set_defaults(run=_handler("soarlab.quant.prepare:prepare_model_cli"))


def _add_measure_commands(sub) -> None:
    """score, eval-score, bench, make-speed-set, check-checkpoint: one measurement, outside the pipeline."""
    p = sub.add_parser("score", help="final score from durations and raw accuracy (RULES.md 1)")
    p.add_argument("--durations", required=True, help="your durations in s: S1=..,S8=..,Smax=..")
    p.add_argument("--best", required=True, help="best durations in s: S1=..,S8=..,Smax=..")
    p.add_argument("--ori-accuracy", required=True, type=float, help="raw accuracy in percent")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the score config, e.g. score=soar2026")
    p.set_defaults(run=_handler("soarlab.final_score:score_cli"))

    p = sub.add_parser("eval-score", help="score correctness predictions made elsewhere (RULES.md 3)")
    p.add_argument("--dataset", required=True, help="SOAR-format correctness set (JSONL)")
    p.add_argument("--predictions", required=True, help="JSONL, one object with 'prediction' per dataset line")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. score=soar2026")
    p.set_defaults(run=_handler("soarlab.accuracy.grading:eval_score_cli"))

    p = sub.add_parser("bench", help="benchmark one level against a running server (RULES.md 2)")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--dataset", required=True, help="SOAR-format speed set (JSONL)")
    p.add_argument("--level", required=True, choices=LEVELS)
    p.add_argument("--tokenizer", help="model dir or tokenizer for output lengths (default: asked of the server)")
    p.add_argument("--api", choices=("auto", "sglang", "openai"), default="auto")
    p.add_argument("--output-dir", help="where the level's files go (default: paths.reports/bench)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the bench config, e.g. bench.repeats=3")
    p.set_defaults(run=_handler("soarlab.bench.cli:bench_cli"))

    p = sub.add_parser("make-speed-set", help="write a SOAR-format speed set with token-exact lengths")
    p.add_argument("--profile", required=True, help="0.1k-4k, 0.1k-0.5k, 60k-0.5k, long-mix, ...")
    p.add_argument("--tokenizer", required=True, help="model dir whose tokenizer defines the lengths")
    p.add_argument("--num-requests", type=int, required=True)
    p.add_argument("--seed", type=int, help="the rows' random seed (default: bench.dataset.seed)")
    p.add_argument("--output", required=True)
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. bench=soar (where the profiles come from)")
    p.set_defaults(run=_handler("soarlab.datasets.speed:make_speed_set_cli"))

    p = sub.add_parser("check-checkpoint", help="validate a quantized checkpoint against RULES.md 7")
    p.add_argument("dir")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=gptq_w8 (its quant.exclude is checked)")
    p.set_defaults(run=_handler("soarlab.quant.check:check_checkpoint_cli"))


def _add_sweep_command(sub) -> None:
    """sweep: Hydra's command line, handed over as it is."""
    p = sub.add_parser("sweep", help="sweep the pipeline with Hydra multirun (each trial a DVC experiment)",
                       description="Hydra's command line: e.g. soarlab sweep quant=gptq_w4,gptq_w8 "
                                   "hydra/sweeper=optuna hydra/launcher=ray_gpu; --name NAME to name/resume it")
    p.add_argument("hydra_args", nargs=argparse.REMAINDER, help="Hydra overrides and options")
    p.set_defaults(run=_handler("soarlab.sweep.app:sweep_cli"))


def _add_decide_commands(sub) -> None:
    """leaderboard, compare, record-submission, gate (soarlab.decide; README "Decide before submitting")."""
    hydra = dict(nargs="*", help="Hydra overrides, e.g. tracking.uri=http://mlflow:5000 decide.confidence=0.9")
    p = sub.add_parser("leaderboard", help="rank the MLflow runs by score, with a Pareto plot")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("--model", help="only runs of this model (model.name)")
    p.add_argument("--speed-set", help="only runs on this speed set (sha256 or its first characters)")
    p.add_argument("--sweep", help="only runs of this sweep (its parent run id)")
    p.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table")
    p.add_argument("--plot", help="where to write the Pareto PNG (default: decide.leaderboard.plot)")
    p.add_argument("--no-plot", action="store_true", help="no Pareto plot")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=_handler("soarlab.decide.leaderboard:leaderboard_cli"))

    p = sub.add_parser("compare", help="per-level duration difference of run B against A, beyond noise (exit 0 better, 1 same, 3 worse, 4 mixed)")
    p.add_argument("a", help="run id, DVC experiment name, best or submitted")
    p.add_argument("b", help="run id, DVC experiment name, best or submitted")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("--rerun", type=int, metavar="N",
                   help="run both configurations N times, interleaved, each from a fresh server start; run means are the samples")
    p.add_argument("--json", action="store_true")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=_handler("soarlab.decide.compare:compare_cli"))

    p = sub.add_parser("record-submission", help="store the platform's official figures on a run")
    p.add_argument("target", metavar="RUN", help="run id, DVC experiment name or best")
    for level in LEVELS:
        p.add_argument(f"--{level}", type=float, help=f"official {level} Benchmark duration (s)")
    p.add_argument("--accuracy", type=float, help="official raw accuracy (ori, percent)")
    p.add_argument("--final", type=float, help="official final score, as shown")
    p.add_argument("--note")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=_handler("soarlab.decide.submission:record_submission_cli"))

    p = sub.add_parser("gate", help="exit 0 only if RUN's predicted official final beats the reference beyond noise")
    p.add_argument("target", metavar="RUN", help="run id, DVC experiment name or best")
    p.add_argument("--against", help="submitted (default: decide.gate.against), best, or a run")
    p.add_argument("--min-gain", type=float, help="points of final to win beyond noise (default: decide.gate.min_gain)")
    p.add_argument("--allow-long-answers", action="store_true",
                   help="pass a run whose answers are longer than the unquantized run's (decide.lengths)")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=_handler("soarlab.decide.gate:gate_cli"))


def tools_on_path() -> None:
    """Put this interpreter's bin folder first on PATH, so that `.venv/bin/soarlab` without an
    activated venv finds the `dvc` installed beside it, and DVC the `soarlab` its stages call."""
    bin_dir = os.path.dirname(sys.executable)
    if os.environ.get("PATH", "").split(os.pathsep)[:1] != [bin_dir]:
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


def main(argv: list[str] | None = None) -> int:
    from soarlab import quiet, startup

    startup.collect_less_at_import()
    quiet.install()  # known-harmless library warnings (each one's why is there)
    tools_on_path()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:  # Hydra parses the rest (its options start with '-', which argparse would take)
        args = argparse.Namespace(run=_handler("soarlab.sweep.app:sweep_cli"), hydra_args=argv[1:], debug=False)
    else:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        # argparse leaves Hydra overrides that follow options after a positional unparsed
        # (`soarlab gate RUN --against best decide.confidence=0.9`): they are overrides all the same.
        if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    stopping.install()
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        print("soarlab: interrupted", file=sys.stderr)
        return 130
    except stopping.Terminated as exc:
        print(f"soarlab: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except Exception as exc:  # noqa: BLE001 - every error ends in one line; the traceback only on request
        if debug:
            traceback.print_exc()
        line, code = error_line(exc)
        print(f"soarlab: error: {line}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
