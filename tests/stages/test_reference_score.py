"""reference (MLflow lookup, re-run when the store changed) -> reports/reference.json -> score (a pure function of files).

A real MLflow sqlite store in a scratch project; runs are logged by soarlab.tracking as `track` does.
"""

from __future__ import annotations

import json

import pytest

from soarlab.atomic import write_json
from soarlab.datasets.soar import file_sha256
from soarlab.errors import SoarError
from soarlab.stages import reference, score
from soarlab.tracking.pipeline_run import log_pipeline_run

LEVELS = ("S1", "S8", "Smax")


def bench_metrics(s1, s8, smax) -> dict:
    return {"S1_duration_s": s1, "S8_duration_s": s8, "Smax_duration_s": smax, "S1_valid": 1, "S8_valid": 1, "Smax_valid": 1}


def record(root, cfg, durations, speed_set_sha):
    """A finished pipeline run in the store, logged as the track stage logs it."""
    write_json(root / "reports" / "bench" / "metrics.json", bench_metrics(*durations))
    log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha=speed_set_sha)


def test_best_recorded_reference_then_score_from_files_only(project_with_accuracy):
    root, cfg = project_with_accuracy
    sha = file_sha256(root / "data" / "speed.jsonl")
    record(root, cfg, (2.0, 3.0, 4.0), sha)
    record(root, cfg, (1.0, 5.0, 6.0), sha)
    record(root, cfg, (0.1, 0.1, 0.1), "another-speed-set")  # not comparable: left out
    reference.run(cfg)
    ref = json.loads((root / "reports" / "reference.json").read_text())
    assert ref == {"source": "best_recorded", "durations": {"S1": 1.0, "S8": 3.0, "Smax": 4.0}, "runs": 2}

    write_json(root / "reports" / "bench" / "metrics.json", bench_metrics(2.0, 2.0, 8.0))
    score.run(cfg)
    result = json.loads((root / "reports" / "score.json").read_text())
    # this run's own S8 (2.0) beats the recorded 3.0; S1 and Smax keep the recorded best
    assert (result["S1_best_s"], result["S8_best_s"], result["Smax_best_s"]) == (1.0, 2.0, 4.0)
    assert result["S1"] == 50.0 and result["S8"] == 100.0 and result["Smax"] == 50.0 and result["valid"] == 1

    (root / "mlflow.db").unlink()  # score reads no MLflow: same files, same score
    score.run(cfg)
    assert json.loads((root / "reports" / "score.json").read_text()) == result


def test_empty_store_scores_against_the_run_itself(project_with_accuracy):
    root, cfg = project_with_accuracy
    reference.run(cfg)
    assert json.loads((root / "reports" / "reference.json").read_text())["durations"] == dict.fromkeys(LEVELS)
    write_json(root / "reports" / "bench" / "metrics.json", bench_metrics(2.0, 3.0, 4.0))
    score.run(cfg)
    assert json.loads((root / "reports" / "score.json").read_text())["performance"] == 100.0


def test_config_reference_needs_every_level(project_with_accuracy):
    root, cfg = project_with_accuracy
    cfg.score.reference.source = "config"
    cfg.score.reference.durations["S1"] = 1.5
    with pytest.raises(SoarError, match="S8, Smax are not set"):
        reference.run(cfg)
    cfg.score.reference.durations = {"S1": 1.5, "S8": 2.0, "Smax": 3.0}
    reference.run(cfg)
    assert json.loads((root / "reports" / "reference.json").read_text())["durations"] == {"S1": 1.5, "S8": 2.0, "Smax": 3.0}
