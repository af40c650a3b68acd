"""track: log this pipeline execution as one MLflow run, from params.yaml (or --params FILE) and reports/.

A re-run in which no stage ran, or in which DVC restored every stage from its run cache (same config,
same reports), is recognised by the digest of its inputs and not logged again: where the reference
changed since, that run's score is updated instead, and said so (without loading MLflow while a local store is unchanged since the answer
was recorded: soarlab.tracking.memo), unless it is a sweep trial (each trial is a child run of its sweep);
the look-up and the new run are one step under a lock, so concurrent tracks of the same inputs log
one run. With official submissions recorded, the new run also gets the predicted official figures
(soarlab.prediction.calibration). Once logged, it answers the reference stage's question for the store as it
is now (soarlab.tracking.durations), so that the next run's reference need not load MLflow."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from soarlab import speculative
from soarlab.datasets.soar import file_sha256
from soarlab.domain import LEVELS
from soarlab.errors import SoarError
from soarlab.names.mlflow_tags import ANSWERS_KEY_TAG
from soarlab.paths import ACCURACY_DIR, PREDICTIONS_FILE, SCORE_FILE, SPEED_SET_FILE, project_root
from soarlab.schema import SoarConfig
from soarlab.tracking import lossless, memo
from soarlab.tracking.durations import answer_reference_ahead
from soarlab.tracking.pipeline_run import log_pipeline_run, rescore_run, run_with_inputs
from soarlab.tracking.run_page import inputs_digest
from soarlab.tracking.runs_view import runs_table_page
from soarlab.tracking.store import inputs_lock, open_store, sqlite_file, store_faults_named, tracking_uri
from soarlab.tracking.tags import run_context


def run(cfg: SoarConfig, params_file: str | Path = "params.yaml") -> None:
    """`params_file`: the config file the stage was run with (`soarlab stage track --params FILE`)."""
    with store_faults_named(cfg):
        log_run(cfg, params_file)


def log_run(cfg: SoarConfig, params_file: str | Path) -> None:
    root = project_root()
    reports, params_file = root / cfg.paths.reports, Path(params_file).resolve()  # as the CLI read it
    refuse_unmeasured(reports / SCORE_FILE)
    digest = inputs_digest(reports, params_file, run_context())
    remembered = memo.recall(cfg, "track", digest)  # the store unchanged since, so its reference and score: MLflow need not load
    with contextlib.nullcontext() if remembered else inputs_lock(cfg):  # the check and the run it creates as one step
        run_id = remembered or run_with_inputs(cfg, digest)
        rescored = None if remembered or not run_id else rescore_run(cfg, run_id, reports)
        if run_id and not rescored:
            memo.remember(cfg, "track", digest, run_id)
            print(f"MLflow run {run_id} already holds these inputs and results (nothing re-ran): no new run logged")
            return
        speed_set = root / cfg.paths.data / SPEED_SET_FILE
        speed_set_sha = file_sha256(speed_set) if speed_set.is_file() else ""
        if rescored:
            print(f"MLflow run {run_id} holds this measurement already (restored from DVC's run cache): its score "
                  f"updated against the new reference, final {rescored[0]} -> {rescored[1]}; no new run logged")
        else:
            run_id = log_pipeline_run(
                cfg, reports=reports, params_file=params_file, root=root,
                speed_set_sha=speed_set_sha, inputs_digest=digest,
            )
    if not rescored:
        from soarlab.prediction.calibration import log_predictions  # scipy: loaded only when a run is logged

        log_predictions(cfg, [run_id])
        if speculative.enabled(cfg.spec):  # did speculative decoding change an answer?
            print(lossless.describe(check_lossless(cfg, run_id, reports)))
        print(f"MLflow run {run_id} logged to {tracking_uri(cfg)}")
        print(f"compare runs: {runs_table_url(cfg, run_id)}")
    if speed_set_sha:  # what the next run's reference stage asks of the store just written
        answer_reference_ahead(cfg, speed_set_sha)
    memo.remember(cfg, "track", digest, run_id)


def refuse_unmeasured(score_file: Path) -> None:
    """A pipeline whose every level is invalid measured nothing: logged, it would read as a result."""
    score = json.loads(score_file.read_text()) if score_file.is_file() else {}
    if len(score.get("invalid_levels", [])) == len(LEVELS):
        raise SoarError(f"{score_file} says every bench level is invalid: no run logged",
                        "fix what failed the requests (reports/bench/<level>.json says what), then `dvc repro`")


def check_lossless(cfg: SoarConfig, run_id: str, reports: Path) -> dict:
    """This run's answers against those of the same configuration with spec=none (soarlab.tracking.lossless)."""
    client, experiment_id = open_store(cfg)
    key = client.get_run(run_id).data.tags[ANSWERS_KEY_TAG]
    return lossless.check(client, experiment_id, run_id, key, reports / ACCURACY_DIR / PREDICTIONS_FILE)


def runs_table_url(cfg: SoarConfig, run_id: str) -> str:
    """Where the MLflow UI shows this run's experiment as a runs table with its score columns
    (tracking.runs_view), with the command that serves a local store."""
    import mlflow

    experiment_id = mlflow.MlflowClient(tracking_uri(cfg)).get_run(run_id).info.experiment_id
    page = runs_table_page(experiment_id)
    uri = tracking_uri(cfg)
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    db = sqlite_file(uri)
    if db is not None and db.parent == Path.cwd():  # the project's own store, served from its folder
        uri = f"sqlite:///{db.name}"
    return f"`mlflow ui --backend-store-uri {uri}`, then http://127.0.0.1:5000/{page}"
