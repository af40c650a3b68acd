"""track: log this pipeline execution as one MLflow run, from params.yaml and reports/."""

from __future__ import annotations

from omegaconf import DictConfig

from soarlab.paths import project_root
from soarlab.datasets.soar import file_sha256
from soarlab.tracking import log_pipeline_run, tracking_uri


def run(cfg: DictConfig) -> None:
    root = project_root()
    speed_set = root / cfg.paths.data / "speed.jsonl"
    run_id = log_pipeline_run(
        cfg,
        reports=root / cfg.paths.reports,
        params_file=root / "params.yaml",
        speed_set_sha=file_sha256(speed_set) if speed_set.is_file() else "",
    )
    print(f"MLflow run {run_id} logged to {tracking_uri(cfg)}")
