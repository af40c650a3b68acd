"""Pipeline stages. Each module has `run(cfg)`: read inputs named by config, write files into
models/, data/ or reports/ (atomically). Tracking reads those files afterwards; stages never log."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from soarlab.config import load_params
from soarlab.names.environment import TRIAL_LOGS_ENV
from soarlab.paths import LOGS_DIR
from soarlab.schema import SoarConfig


def run_stage(name: str, params_file: str) -> int:
    """Run stage `name` on the config in `params_file` (what `soarlab stage` and so dvc.yaml call)."""
    from soarlab.parent_death import stop_with_dvc
    from soarlab.tracking.stage_times import record_stage_time

    from soarlab.errors import SoarError

    stop_with_dvc()  # a killed `dvc` stops its stage (and the stage's server) too
    module = importlib.import_module(f"soarlab.stages.{name.replace('-', '_')}")
    try:
        cfg = load_params(params_file)  # validated (soarlab.schema): a bad engine.port fails every stage at once
    except SoarError as exc:  # `dvc repro -s STAGE` skips check-params: DVC has removed this stage's outputs
        _say_how_to_restore(exc)
        raise
    _remove_leftovers(cfg)
    start = time.time()
    try:
        if name == "track":  # it records the config file itself: its digest and an artifact
            module.run(cfg, params_file=params_file)
        else:
            module.run(cfg)
    except BaseException as exc:
        _keep_logs(Path(cfg.paths.reports) / LOGS_DIR, exc)
        _say_how_to_restore(exc)
        raise
    # The MLflow run's start and end are the pipeline's: track reads these times back.
    record_stage_time(Path(cfg.paths.reports), name, start, time.time())
    return 0


def _say_how_to_restore(exc: BaseException) -> None:
    """Under DVC, which removed the stage's cached outputs before running it: the error's fix ends with
    the command that puts them back from DVC's cache."""
    import os

    from soarlab.errors import SoarError
    from soarlab.names.environment import DVC_STAGE_ENV

    stage = os.environ.get(DVC_STAGE_ENV)
    if isinstance(exc, SoarError) and stage and _removes_outputs(stage):
        exc.fix = f"{exc.fix}; `dvc checkout {stage}` restores its outputs"
        exc.args = (f"{exc.problem}. Fix: {exc.fix}",)


def _removes_outputs(stage: str) -> bool:
    """Whether DVC removes some output of `stage` before it runs: a cached one that is not `persist`."""
    import yaml

    from soarlab.paths import project_root

    dvc_yaml = project_root() / "dvc.yaml"
    outs = yaml.safe_load(dvc_yaml.read_text()).get("stages", {}).get(stage, {}).get("outs", []) if dvc_yaml.is_file() else []
    options = [next(iter(out.values())) if isinstance(out, dict) else {} for out in outs]
    return any(not o.get("persist") and o.get("cache", True) for o in options)


def _keep_logs(logs: Path, exc: BaseException) -> None:
    """In a sweep trial: copy the failed stage's logs where they outlive the trial's workspace, and make
    the error name the copies (its fix says which log to read)."""
    import os
    import shutil

    from soarlab.errors import SoarError

    kept = os.environ.get(TRIAL_LOGS_ENV)
    if not kept or not logs.is_dir():
        return
    kept = Path(kept)
    kept.mkdir(parents=True, exist_ok=True)
    for log in logs.iterdir():
        if log.is_file():
            shutil.copy2(log, kept / log.name)
    if isinstance(exc, SoarError):
        for old in dict.fromkeys((str(logs.resolve()), str(logs))):
            exc.problem, exc.fix = exc.problem.replace(old, str(kept)), exc.fix.replace(old, str(kept))
        exc.args = (f"{exc.problem}. Fix: {exc.fix}",)


def _remove_leftovers(cfg: SoarConfig) -> None:
    """What killed runs left half-written (soarlab.atomic temporaries): removed before any stage runs,
    so that it is never taken for output nor tracked."""
    import shutil

    from soarlab.atomic import project_temp_outputs
    from soarlab.paths import project_root

    for path in project_temp_outputs(project_root(), cfg.paths):
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        print(f"soarlab: removed {path} (left by a run that was killed)")
