"""track: log this pipeline execution as one MLflow run, from params.yaml and reports/.

A re-run in which no stage ran (same config, same reports) is recognised by the digest of its
inputs and not logged again, unless it is a sweep trial (each trial is a child run of its sweep). With official submissions recorded, the new run also gets the
predicted official figures (soarlab.decide.calibration)."""

from __future__ import annotations

from omegaconf import DictConfig

from soarlab.datasets.soar import file_sha256
from soarlab.paths import project_root
from soarlab.tracking.pipeline_run import log_pipeline_run, run_with_inputs
from soarlab.tracking.run_page import inputs_digest
from soarlab.tracking.store import tracking_uri
from soarlab.tracking.tags import run_context


def run(cfg: DictConfig) -> None:
    from soarlab.decide.calibration import log_predictions

    root = project_root()
    reports, params_file = root / cfg.paths.reports, root / "params.yaml"
    digest = inputs_digest(reports, params_file, run_context())
    same = run_with_inputs(cfg, digest)
    if same:
        print(f"MLflow run {same} already holds these inputs and results (nothing re-ran): no new run logged")
        return
    speed_set = root / cfg.paths.data / "speed.jsonl"
    run_id = log_pipeline_run(
        cfg, reports=reports, params_file=params_file,
        speed_set_sha=file_sha256(speed_set) if speed_set.is_file() else "", inputs_digest=digest,
    )
    print(f"MLflow run {run_id} logged to {tracking_uri(cfg)}")
    log_predictions(cfg, [run_id])
