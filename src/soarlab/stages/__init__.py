"""Pipeline stages. Each module has `run(cfg)`: read inputs named by config, write files into
models/, data/ or reports/ (atomically). Tracking reads those files afterwards; stages never log."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from soarlab.config import load_params


def run_stage_cli(args) -> int:
    from soarlab.tracking.stage_times import record_stage_time

    module = importlib.import_module(f"soarlab.stages.{args.name.replace('-', '_')}")
    cfg = load_params(args.params)  # validated (soarlab.schema): a bad engine.port fails every stage at once
    _remove_leftovers(cfg)
    start = time.time()
    module.run(cfg)
    # The MLflow run's start and end are the pipeline's: track reads these times back.
    record_stage_time(Path(cfg.paths.reports), args.name, start, time.time())
    return 0


def _remove_leftovers(cfg) -> None:
    """What killed runs left half-written (soarlab.atomic temporaries): removed before any stage runs,
    so that it is never taken for output nor tracked."""
    import shutil

    from soarlab.atomic import project_temp_outputs
    from soarlab.paths import project_root

    for path in project_temp_outputs(project_root(), cfg.paths):
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        print(f"soarlab: removed {path} (left by a run that was killed)")
