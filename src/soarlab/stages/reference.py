"""reference: the best durations (`duration_best` of RULES.md 1) the score is measured against.

Always runs (dvc.yaml `always_changed`), because its source, the MLflow store, is state DVC cannot
see; `score` then reads only files. While a local store is unchanged, its last answer is reused without
loading MLflow (soarlab.tracking.memo). `score.reference.source`:
  config         the numbers in score.reference.durations
  best_recorded  the fastest valid run recorded for this model on this speed set, per level (null
                 where none is recorded; score then uses this run's own duration)
  baseline_run   the durations of the MLflow run score.reference.baseline_run_id
Writes reports/reference.json: {source, durations: {level: seconds | null}, runs}.
"""

from __future__ import annotations

from soarlab.atomic import write_json
from soarlab.datasets.soar import file_sha256
from soarlab.errors import SoarError
from soarlab.domain import LEVELS
from soarlab.paths import project_root
from soarlab.schema import SoarConfig


def reference(cfg: SoarConfig, speed_set_sha: str) -> dict:
    from soarlab.tracking.durations import recorded_durations

    ref = cfg.score.reference
    if ref.source == "config":
        missing = [level for level in LEVELS if not ref.durations[level]]
        if missing:
            raise SoarError(f"score.reference.source is config but durations of {', '.join(missing)} are not set",
                            "set score.reference.durations.S1=SECONDS (and S8, Smax)")
        return {"source": "config", "durations": {level: ref.durations[level] for level in LEVELS}, "runs": 0}
    if ref.source == "baseline_run":
        if not ref.baseline_run_id:
            raise SoarError("score.reference.source is baseline_run but no baseline_run_id is set",
                            "set score.reference.baseline_run_id to an MLflow run id")
        runs = recorded_durations(cfg, "", run_id=ref.baseline_run_id)
        if not runs:
            raise SoarError(f"run {ref.baseline_run_id} has no valid durations", "pick a run whose bench stage was valid")
        return {"source": "baseline_run", "durations": runs[0], "runs": 1}
    runs = recorded_durations(cfg, speed_set_sha)
    best = {level: min((run[level] for run in runs), default=None) for level in LEVELS}
    return {"source": "best_recorded", "durations": best, "runs": len(runs)}


def run(cfg: SoarConfig) -> None:
    from soarlab.config import plain
    from soarlab.tracking import memo

    root = project_root()
    speed_set_sha = file_sha256(root / cfg.paths.data / "speed.jsonl")
    question = [plain(cfg.score.reference), cfg.model.name, cfg.tracking.experiment, speed_set_sha]
    result = memo.recall(cfg, "reference", question)  # a no-op re-run: the store is unchanged, MLflow need not load
    if result is None:
        result = reference(cfg, speed_set_sha)
        memo.remember(cfg, "reference", question, result)
    write_json(root / cfg.paths.reports / "reference.json", result)
    print(f"reference ({result['source']}, {result['runs']} run(s)): {result['durations']}")
