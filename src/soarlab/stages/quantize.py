"""quantize stage: models/base -> models/quantized (+ reports/quantize/report.json, metrics.json).

Runs the `quant` preset (conf/quant/) through soarlab.quant.quantize; the output is checked with
soarlab.quant.check before it is renamed into place, so a failing preset leaves no model behind.
"""

from __future__ import annotations

from soarlab.atomic import write_json
from soarlab.paths import project_root
from soarlab.schema import SoarConfig


def run(cfg: SoarConfig) -> dict:
    from soarlab.quant.quantize import pin_cpu_numerics, quantize_checkpoint

    pin_cpu_numerics(cfg.quant.cpu_numerics)  # before anything loads torch: the same bytes on any CPU
    root = project_root()
    report = quantize_checkpoint(root / cfg.paths.base_model, root / cfg.paths.quantized_model, cfg.quant,
                                 model_name=cfg.model.name, root=root)
    out = root / cfg.paths.reports / "quantize"
    write_json(out / "report.json", report)
    write_json(out / "metrics.json", report["metrics"])
    return report
