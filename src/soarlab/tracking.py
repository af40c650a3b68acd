"""MLflow tracking: one run per pipeline execution, built from the files the stages wrote.

Stages never talk to MLflow; the `track` stage reads params.yaml and reports/ and logs:
the composed config as flattened params, every `reports/**/metrics.json` as metrics (prefixed
by its folder, e.g. `bench.S1_duration_s`), `reports/score.json`, all report files as artifacts,
and tags for the git commit, the DVC experiment, the model and the speed set.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

from omegaconf import DictConfig

from soarlab.config import flatten
from soarlab.paths import owning_project_root

LEVELS = ("S1", "S8", "Smax")
# MLflow rejects param values over this many characters.
_MAX_PARAM_CHARS = 6000
# Tags a `soarlab sweep` trial hands to its pipeline's run through the environment (tag -> variable):
# the parent run makes the run a child of the sweep's run in the MLflow UI.
SWEEP_TRIAL_ENV = {
    "mlflow.parentRunId": "SOARLAB_PARENT_RUN_ID",
    "soarlab.sweep": "SOARLAB_SWEEP",
    "soarlab.trial": "SOARLAB_TRIAL",
    "soarlab.cuda_visible_devices": "CUDA_VISIBLE_DEVICES",
}


def tracking_uri(cfg: DictConfig) -> str:
    if cfg.tracking.uri:
        return str(cfg.tracking.uri)
    return f"sqlite:///{owning_project_root() / 'mlflow.db'}"


def _client(cfg: DictConfig):
    import mlflow

    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name(cfg.tracking.experiment)
    if experiment is None:
        # A local store keeps artifacts beside the database, not in whatever folder DVC ran from.
        location = (owning_project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
        experiment_id = mlflow.create_experiment(cfg.tracking.experiment, artifact_location=location)
    else:
        experiment_id = experiment.experiment_id
    return mlflow.MlflowClient(uri), experiment_id


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_tags(cfg: DictConfig, speed_set_sha: str) -> dict[str, str]:
    tags = {
        "git.commit": _git("rev-parse", "HEAD"),
        "git.dirty": str(bool(_git("status", "--porcelain", "--untracked-files=no"))),
        "dvc.experiment": os.environ.get("DVC_EXP_NAME", ""),
        "dvc.baseline_rev": os.environ.get("DVC_EXP_BASELINE_REV", ""),
        "soarlab.model": str(cfg.model.name),
        "soarlab.quant": str(cfg.quant.name),
        "soarlab.engine": str(cfg.engine.name),
        "soarlab.speed_set_sha": speed_set_sha,
        **{tag: os.environ.get(var, "") for tag, var in SWEEP_TRIAL_ENV.items()},
    }
    return {key: value for key, value in tags.items() if value}


def _report_metrics(reports: Path) -> Iterator[tuple[str, float]]:
    for path in sorted(reports.rglob("metrics.json")):
        prefix = ".".join(path.parent.relative_to(reports).parts)
        for key, value in json.loads(path.read_text()).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield f"{prefix}.{key}", float(value)
    score = reports / "score.json"
    if score.is_file():
        for key, value in json.loads(score.read_text()).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield f"score.{key}", float(value)


def log_pipeline_run(cfg: DictConfig, reports: Path, params_file: Path, speed_set_sha: str = "") -> str:
    """Log one MLflow run from the files under `reports`; return its id."""
    from mlflow.entities import Metric, Param, RunTag

    client, experiment_id = _client(cfg)
    tags = run_tags(cfg, speed_set_sha)
    run = client.create_run(experiment_id, run_name=tags.get("dvc.experiment") or None, tags=tags)
    run_id = run.info.run_id
    try:
        params = [Param(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in flatten(cfg).items()]
        params = [Param(p.key, p.value[:_MAX_PARAM_CHARS]) for p in params]
        now_ms = int(time.time() * 1000)
        metrics = [Metric(k, v, now_ms, 0) for k, v in _report_metrics(reports)]
        for start in range(0, len(params), 100):  # MLflow's batch limit is 100 params per call
            client.log_batch(run_id, params=params[start : start + 100])
        client.log_batch(run_id, metrics=metrics, tags=[RunTag(k, v) for k, v in tags.items()])
        client.log_artifact(run_id, str(params_file))
        for path in sorted(p for p in reports.rglob("*") if p.is_file()):
            client.log_artifact(run_id, str(path), artifact_path=str(path.parent.relative_to(reports.parent)))
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    return run_id


def recorded_durations(cfg: DictConfig, speed_set_sha: str, run_id: str | None = None) -> list[dict[str, float]]:
    """Per-level durations of finished runs of this model on this speed set (or of one run)."""
    client, experiment_id = _client(cfg)
    if run_id:
        runs = [client.get_run(run_id)]
    else:
        query = f"tags.`soarlab.model` = '{cfg.model.name}' and tags.`soarlab.speed_set_sha` = '{speed_set_sha}'"
        runs = client.search_runs([experiment_id], filter_string=query, max_results=5000)
    found = []
    for run in runs:
        metrics = run.data.metrics
        durations = {level: metrics.get(f"bench.{level}_duration_s") for level in LEVELS}
        valid = all(metrics.get(f"bench.{level}_valid") == 1.0 for level in LEVELS)
        if all(durations.values()) and valid:
            found.append(durations)
    return found
