"""MLflow tracking: one run per pipeline execution, built from the files the stages wrote.

Stages never talk to MLflow; the `track` stage reads params.yaml and reports/ and logs:
the composed config as flattened params, every `reports/**/metrics.json` as metrics (prefixed
by its folder, e.g. `bench.S1_duration_s`), `reports/score.json`, all report files as artifacts,
and tags for the git commit, the DVC experiment, the model and the speed set.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Iterator

from omegaconf import DictConfig

from soarlab.atomic import is_temp_output
from soarlab.bench.metrics import level_key
from soarlab.config import flatten
from soarlab.domain import LEVELS
from soarlab.decide import run_page
from soarlab.decide.run_page import EXPERIMENT_KIND_TAG, INPUTS_DIGEST_TAG, MACHINE_TAG, RUNS_TABLE_KIND
from soarlab.paths import owning_project_root

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
# The `soarlab compare --rerun` a run belongs to (soarlab.decide.rerun), through the environment likewise.
COMPARE_ENV = "SOARLAB_COMPARE"


def run_context() -> dict[str, str]:
    """The sweep trial this execution is (tag -> value; empty outside `soarlab sweep`): the sweep, its
    parent run and the trial. Not the GPU it got, which says where it ran, not what it is."""
    return {tag: os.environ[var] for tag, var in SWEEP_TRIAL_ENV.items()
            if tag != "soarlab.cuda_visible_devices" and os.environ.get(var)}


def tracking_uri(cfg: DictConfig) -> str:
    if cfg.tracking.uri:
        return str(cfg.tracking.uri)
    return f"sqlite:///{owning_project_root() / 'mlflow.db'}"


def _store_lock(uri: str):
    """A lock beside a local sqlite store, held while the store and the experiment are created:
    two processes migrating one new database at once fail (`_alembic_tmp_experiments already exists`)."""
    from filelock import FileLock

    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{db}.lock")


def _client(cfg: DictConfig):
    import mlflow

    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    with _store_lock(uri):
        experiment = mlflow.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            # A local store keeps artifacts beside the database, not in whatever folder DVC ran from.
            location = (owning_project_root() / "mlartifacts").as_uri() if uri.startswith("sqlite:") else None
            experiment_id = mlflow.create_experiment(cfg.tracking.experiment, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        client = mlflow.MlflowClient(uri)
        if (experiment.tags if experiment else {}).get(EXPERIMENT_KIND_TAG) != RUNS_TABLE_KIND:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, RUNS_TABLE_KIND)  # opens on the runs table
    return client, experiment_id


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_tags(cfg: DictConfig, speed_set_sha: str) -> dict[str, str]:
    tags = {
        "git.commit": _git("rev-parse", "HEAD"),
        # dvc.lock, params.yaml and score.json (a metric kept in git) are rewritten by the pipeline itself.
        "git.dirty": str(bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!dvc.lock",
                                   ":!params.yaml", f":!{cfg.paths.reports}/score.json"))),
        "dvc.experiment": os.environ.get("DVC_EXP_NAME", ""),
        "dvc.baseline_rev": os.environ.get("DVC_EXP_BASELINE_REV", ""),
        "soarlab.model": str(cfg.model.name),
        "soarlab.quant": str(cfg.quant.name),
        "soarlab.engine": str(cfg.engine.name),
        "soarlab.speed_set_sha": speed_set_sha,
        # Between-run noise is a property of the machine (soarlab.decide.noise keeps a record per machine).
        MACHINE_TAG: platform.node(),
        "soarlab.compare": os.environ.get(COMPARE_ENV, ""),
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


def _in_temp_output(path: Path, reports: Path) -> bool:
    """Inside an unfinished write (soarlab.atomic): never a report, never uploaded."""
    return any(is_temp_output(Path(part)) for part in path.relative_to(reports).parts)


def run_params(cfg: DictConfig) -> dict[str, str]:
    """The flattened config as MLflow stores it: strings, JSON for non-strings, cut to MLflow's limit."""
    params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in flatten(cfg).items()}
    return {k: v[:_MAX_PARAM_CHARS] for k, v in params.items()}


def run_with_inputs(cfg: DictConfig, digest: str) -> str | None:
    """The id of a run already logged from exactly these inputs (a no-op re-run), or None."""
    client, experiment_id = _client(cfg)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{INPUTS_DIGEST_TAG}` = '{digest}'", max_results=1)
    return found[0].info.run_id if found else None


def log_pipeline_run(cfg: DictConfig, reports: Path, params_file: Path, speed_set_sha: str = "", inputs_digest: str = "") -> str:
    """Log one MLflow run from the files under `reports`; return its id."""
    from mlflow.entities import Metric, Param

    client, experiment_id = _client(cfg)
    root = params_file.parent
    tags = {**run_tags(cfg, speed_set_sha), **({INPUTS_DIGEST_TAG: inputs_digest} if inputs_digest else {})}
    tags["mlflow.note.content"] = run_page.recipe_markdown(tags)
    params = run_params(cfg)
    run = client.create_run(
        experiment_id, start_time=run_page.pipeline_start_ms(reports), run_name=run_page.run_name(cfg, params), tags=tags
    )
    run_id = run.info.run_id
    try:
        now_ms = int(time.time() * 1000)
        metrics = [Metric(k, v, now_ms, 0) for k, v in _report_metrics(reports)]
        metrics += run_page.bench_series(reports, LEVELS, now_ms)
        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow's batch limit is 100 params per call
            client.log_batch(run_id, params=items[start : start + 100])
        for start in range(0, len(metrics), 1000):  # and 1000 metrics
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
        client.log_inputs(run_id, datasets=run_page.dataset_inputs(cfg, root / cfg.paths.data))
        run_page.log_checkpoint(client, experiment_id, run_id, cfg, root, tags)
        client.log_artifact(run_id, str(params_file))
        if (root / "dvc.lock").is_file():
            client.log_artifact(run_id, str(root / "dvc.lock"))
        for path in sorted(p for p in reports.rglob("*") if p.is_file() and not _in_temp_output(p, reports)):
            client.log_artifact(run_id, str(path), artifact_path=str(path.parent.relative_to(reports.parent)))
        client.set_terminated(run_id, "FINISHED", end_time=int(time.time() * 1000))
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
        durations = {level: metrics.get("bench." + level_key(level, "duration_s")) for level in LEVELS}
        valid = all(metrics.get("bench." + level_key(level, "valid")) == 1.0 for level in LEVELS)
        if all(durations.values()) and valid:
            found.append(durations)
    return found
