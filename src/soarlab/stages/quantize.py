"""quantize stage: models/base -> models/quantized (+ reports/quantize/report.json, metrics.json,
gptqmodel.log).

Runs the `quant` preset (conf/quant/) through soarlab.quant.quantize; the output is checked with
soarlab.quant.check before it is renamed into place, so a failing preset leaves no model behind.
GPTQModel's own output (banner, INFO lines, progress, the configs it saves) goes to gptqmodel.log; the
stage prints one line, and the preset's warnings.
"""

from __future__ import annotations

from soarlab.atomic import write_json
from soarlab.paths import METRICS_FILE, project_root
from soarlab.schema import SoarConfig

LIBRARY_LOG = "gptqmodel.log"  # in reports/quantize/


def run(cfg: SoarConfig) -> dict:
    from soarlab.quant.quantize import pin_cpu_numerics, quantize_checkpoint

    pin_cpu_numerics(cfg.quant.cpu_numerics)  # before anything loads torch: the same bytes on any CPU
    root = project_root()
    out = root / cfg.paths.reports / "quantize"
    log = out / LIBRARY_LOG
    report = quantize_checkpoint(root / cfg.paths.base_model, root / cfg.paths.quantized_model, cfg.quant,
                                 model_name=cfg.model.name, root=root, library_log=log)
    write_json(out / "report.json", report)
    write_json(out / METRICS_FILE, report["metrics"])
    for warning in report["warnings"]:
        print(f"quantize: warning: {warning}")
    m = report["metrics"]
    where = f"; GPTQModel's log: {log.relative_to(root)}" if log.is_file() else ""
    print(f"quantize: {cfg.quant.name}, {m['modules_4bit']} modules at 4 bits, {m['modules_8bit']} at 8, "
          f"{m['modules_bf16']} bf16; {m['size_before_bytes'] / 1e6:.2f} -> {m['size_after_bytes'] / 1e6:.2f} MB "
          f"in {m['total_seconds']:.0f} s{where}")
    return report
