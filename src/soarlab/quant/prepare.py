"""`soarlab prepare-model --input DIR --output DIR [overrides]`: the submission's prepare_model.sh.

The platform runs `bash prepare_model.sh --input <original model> --output <processed model>` on
the evaluation machine (RULES.md 4); the script calls this command, e.g. with
`model=minicpm_sala quant=gptq_w4_mixed`. The config comes from conf/ (Hydra overrides), so the
submission quantizes exactly as the preset the pipeline measured.
"""

from __future__ import annotations

import json
import sys

from soarlab.config import compose
from soarlab.paths import project_root


def prepare_model_cli(args) -> int:
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
