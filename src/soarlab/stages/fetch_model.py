"""Stage fetch-model: write `paths.base_model` (the tiny model shipped with the package, or the real one downloaded).

model.source: embedded -> soarlab.tiny installs the shipped checkpoint (the same bytes on every
machine, checked against its sha256 manifest); huggingface | modelscope | local -> soarlab.hub at
model.revision. Writes reports/fetch-model/metrics.json: model_bytes, model_files, seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

from soarlab.atomic import write_json
from soarlab.paths import METRICS_FILE, project_root
from soarlab.schema import SoarConfig


def run(cfg: SoarConfig) -> Path:
    from soarlab import hub

    root = project_root()
    target = root / cfg.paths.base_model
    t0 = time.monotonic()
    if cfg.model.source == "embedded":
        from soarlab.tiny import install_tiny_model

        install_tiny_model(target)
    else:
        hub.fetch_model(cfg.model, target)
    hub.validate_model_dir(target)
    files = [p for p in target.rglob("*") if p.is_file()]
    write_json(root / cfg.paths.reports / "fetch-model" / METRICS_FILE, {
        "model_bytes": sum(p.stat().st_size for p in files),
        "model_files": len(files),
        "seconds": round(time.monotonic() - t0, 3),
    })
    return target
