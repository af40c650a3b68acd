"""stage, params, doctor, base-image, prepare-model: the pipeline, its config and this machine."""

from __future__ import annotations

STAGES = ("check-params", "inputs", "fetch-model", "fetch-draft", "fetch-data", "quantize", "package", "evaluate", "bench", "accuracy", "reference", "score", "track")


def add_parsers(sub) -> None:
    p = sub.add_parser("stage", help="run one pipeline stage with params.yaml (what dvc.yaml calls)")
    p.add_argument("name", choices=STAGES)
    p.add_argument("--params", default="params.yaml", help="config file the stage reads")
    p.set_defaults(run=stage_cli)

    p = sub.add_parser("params", help="write params.yaml from the conf/ defaults (plus overrides)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=none engine.port=31000")
    p.add_argument("--output", default="params.yaml")
    p.set_defaults(run=params_cli)

    p = sub.add_parser("doctor", help="what this machine can run (GPU, Docker/Podman, SGLang, versions) and what killed runs left")
    p.set_defaults(run=doctor_cli)

    p = sub.add_parser("base-image", help="make the CPU serving image's Debian base with mmdebstrap (if missing)")
    p.add_argument("--force", action="store_true", help="make it again even if it exists")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. package.cpu_image.suite=trixie")
    p.set_defaults(run=base_image_cli)

    p = sub.add_parser("prepare-model", help="quantize a model dir (the submission's prepare_model.sh)")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. quant=gptq_w4_mixed")
    p.set_defaults(run=prepare_model_cli)


def stage_cli(args) -> int:
    """`soarlab stage NAME [--params FILE]`: one pipeline stage, as dvc.yaml runs it (scripts/stage.sh)."""
    from soarlab.stages import run_stage

    return run_stage(args.name, args.params)


def params_cli(args) -> int:
    """`soarlab params [overrides] [--output FILE]`: regenerate params.yaml, the file `dvc repro` reads."""
    from soarlab.config import write_params

    write_params(args.overrides, args.output)
    return 0


def doctor_cli(args) -> int:
    """`soarlab doctor`: one line per check of this machine, and what killed runs left behind."""
    from soarlab.doctor import collect, format_table

    print(format_table(collect()))
    return 0


def base_image_cli(args) -> int:
    """`soarlab base-image [--force] [overrides]`: the CPU image's Debian base, made when missing."""
    from pathlib import Path

    from soarlab.config import compose
    from soarlab.container import container_tool, ensure_cpu_base
    from soarlab.paths import LOGS_DIR

    cfg = compose(args.overrides or [])
    spec = cfg.package.cpu_image
    cli = container_tool(cfg.package.container_cli)
    log = Path(cfg.paths.reports) / LOGS_DIR / "base-image.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    made = ensure_cpu_base(cli, spec.base, spec.suite, spec.apt_sources, log, force=args.force)
    print(f"base image {spec.base}: {'made' if made else 'present'} ({cli.image_bytes(spec.base)} bytes, {cli.name})")
    return 0


def prepare_model_cli(args) -> int:
    """`soarlab prepare-model --input DIR --output DIR [overrides]`: the submission's prepare_model.sh.

    The platform runs `bash prepare_model.sh --input <original model> --output <processed model>` on
    the evaluation machine (RULES.md 4); the script calls this command, e.g. with
    `model=minicpm_sala quant=gptq_w4_mixed`. The config comes from conf/ (Hydra overrides), so the
    submission quantizes exactly as the preset the pipeline measured.
    """
    import json
    import sys

    from soarlab.config import compose
    from soarlab.paths import project_root
    from soarlab.quant.quantize import pin_cpu_numerics, quantize_checkpoint

    cfg = compose(args.overrides or [])
    pin_cpu_numerics(cfg.quant.cpu_numerics)  # before anything loads torch: the same bytes on any CPU
    report = quantize_checkpoint(args.input, args.output, cfg.quant, model_name=cfg.model.name,
                                 root=project_root())
    m = report["metrics"]
    for w in report["warnings"]:
        print(f"soarlab: warning: {w}", file=sys.stderr)
    print(json.dumps({"preset": report["preset"], "output": report["output"],
                      "serve_quantization": report["serve_quantization"],
                      "size_before_bytes": m["size_before_bytes"], "size_after_bytes": m["size_after_bytes"],
                      "total_seconds": round(m["total_seconds"], 2)}))
    return 0
