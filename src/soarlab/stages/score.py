"""score: the final SOAR score of this configuration (RULES.md 1), from the bench and accuracy reports."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from soarlab.atomic import write_json
from soarlab.errors import SoarError
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.metrics.scoring import final_score
from soarlab.paths import project_root
from soarlab.datasets.soar import file_sha256
from soarlab.tracking import recorded_durations


def _read(path: Path) -> dict:
    if not path.is_file():
        raise SoarError(f"{path} not found", "run the stage that writes it first (dvc repro runs them in order)")
    return json.loads(path.read_text())


def reference_durations(cfg: DictConfig, durations: dict[str, float], speed_set: Path) -> dict[str, float]:
    """duration_best per level, from config, the best recorded run, or a baseline run."""
    ref = cfg.score.reference
    if ref.source == "config":
        return {level: ref.durations[level] for level in LEVELS}
    if ref.source == "baseline_run":
        if not ref.baseline_run_id:
            raise SoarError("score.reference.source is baseline_run but no baseline_run_id is set", "set score.reference.baseline_run_id to an MLflow run id")
        runs = recorded_durations(cfg, "", run_id=ref.baseline_run_id)
        if not runs:
            raise SoarError(f"run {ref.baseline_run_id} has no valid durations", "pick a run whose bench stage was valid")
        return runs[0]
    if ref.source == "best_recorded":
        candidates = [*recorded_durations(cfg, file_sha256(speed_set)), durations]
        return {level: min(run[level] for run in candidates) for level in LEVELS}
    raise SoarError(f"unknown score.reference.source {ref.source!r}", "use config, best_recorded or baseline_run")


def run(cfg: DictConfig) -> None:
    root = project_root()
    reports = root / cfg.paths.reports
    bench = _read(reports / "bench" / "metrics.json")
    accuracy = _read(reports / "accuracy" / "metrics.json")
    durations = {level: bench.get(level_key(level, "duration_s")) for level in LEVELS}
    invalid = [level for level in LEVELS if not durations[level] or not bench.get(level_key(level, "valid"), 1)]
    base = {level_key(level, "duration_s"): durations[level] for level in LEVELS}
    if invalid:
        # An invalid level is reported, never scored (RULES.md 2: failed or short requests).
        result = {**base, "valid": 0, "invalid_levels": invalid, "final": None}
        print(f"score: levels {', '.join(invalid)} are invalid (see reports/bench); no score")
    else:
        best = reference_durations(cfg, durations, root / cfg.paths.data / "speed.jsonl")
        score = final_score(durations, best, accuracy["ori_accuracy"], cfg.model.baseline_accuracy, cfg.score)
        result = {**score, **base, **{f"{level}_best_s": best[level] for level in LEVELS}, "valid": 1}
        print(json.dumps(score))
    write_json(reports / "score.json", result)
