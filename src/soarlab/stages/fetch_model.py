"""Stage fetch-model: write `paths.base_model` (the tiny model built here, or the real one downloaded).

model.source: embedded -> soarlab.tiny builds it (trained on the embedded correctness set when
that file exists); huggingface | modelscope | local -> soarlab.hub at model.revision.
Writes reports/fetch-model/metrics.json: model_bytes, model_files, seconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import OmegaConf

from soarlab.datasets.embedded import CORRECTNESS as EMBEDDED_QA
from soarlab.atomic import write_json
from soarlab.paths import project_root


def embedded_qa_rows(path: Path | None = None) -> list[dict]:
    """The embedded correctness set (task/question/gold per line) the tiny model trains on; [] if absent."""
    path = EMBEDDED_QA if path is None else path
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(cfg) -> Path:
    from soarlab import hub

    root = project_root()
    target = root / cfg.paths.base_model
    t0 = time.monotonic()
    if cfg.model.source == "embedded":
        from soarlab.tiny import build_tiny_model

        spec = OmegaConf.to_container(cfg.model.tiny, resolve=True)
        build_tiny_model(target, spec, embedded_qa_rows())
    else:
        hub.fetch_model(cfg.model, target)
    hub.validate_model_dir(target)
    files = [p for p in target.rglob("*") if p.is_file()]
    write_json(root / cfg.paths.reports / "fetch-model" / "metrics.json", {
        "model_bytes": sum(p.stat().st_size for p in files),
        "model_files": len(files),
        "seconds": round(time.monotonic() - t0, 3),
    })
    return target
