"""The per-level durations of recorded pipeline runs, and the reference the score is measured against
(`duration_best` of RULES.md 1), from them or from config (`score.reference.source`):
  config         the numbers in score.reference.durations
  best_recorded  the fastest valid run recorded for this model on this speed set, per level (null
                 where none is recorded; score then uses this run's own duration)
  baseline_run   the durations of the MLflow run score.reference.baseline_run_id
"""

from __future__ import annotations

from soarlab.bench.metrics import level_key
from soarlab.config import plain
from soarlab.domain import LEVELS
from soarlab.errors import SoarError
from soarlab.names.mlflow_tags import MODEL_TAG, SPEED_SET_TAG
from soarlab.schema import SoarConfig
from soarlab.tracking import memo
from soarlab.tracking.store import open_store, store_not_made, store_stamp


def recorded_durations(cfg: SoarConfig, speed_set_sha: str, run_id: str | None = None) -> list[dict[str, float]]:
    """Per-level durations of finished valid runs of this model on this speed set (or of one run)."""
    client, experiment_id = open_store(cfg)
    if run_id:
        runs = [client.get_run(run_id)]
    else:
        query = f"tags.`{MODEL_TAG}` = '{cfg.model.name}' and tags.`{SPEED_SET_TAG}` = '{speed_set_sha}'"
        runs = client.search_runs([experiment_id], filter_string=query, max_results=5000)
    found = []
    for run in runs:
        metrics = run.data.metrics
        durations = {level: metrics.get("bench." + level_key(level, "duration_s")) for level in LEVELS}
        valid = all(metrics.get("bench." + level_key(level, "valid")) == 1.0 for level in LEVELS)
        if all(durations.values()) and valid:
            found.append(durations)
    return found


def reference(cfg: SoarConfig, speed_set_sha: str) -> dict:
    """{source, durations: {level: seconds | null}, runs}: what reports/reference.json holds."""
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
    runs = [] if store_not_made(cfg) else recorded_durations(cfg, speed_set_sha)  # a project's first run
    best = {level: min((run[level] for run in runs), default=None) for level in LEVELS}
    return {"source": "best_recorded", "durations": best, "runs": len(runs)}


def remembered_reference(cfg: SoarConfig, speed_set_sha: str) -> tuple[dict, bool]:
    """(reference(), whether it was remembered): from soarlab.tracking.memo while a local store is unchanged
    since it was last asked (without loading MLflow), else asked of the store and remembered."""
    question = [plain(cfg.score.reference), cfg.model.name, cfg.tracking.experiment, speed_set_sha]
    return memo.answer(cfg, "reference", question, lambda: reference(cfg, speed_set_sha))


def answer_reference_ahead(cfg: SoarConfig, speed_set_sha: str) -> None:
    """Answer the reference question for a local store as it is now, after a write, while MLflow is loaded:
    the next run's reference stage then reads it without loading MLflow. A tracking server has no stamp
    to remember it by; each reference stage asks it anyway."""
    if store_stamp(cfg) is not None:
        remembered_reference(cfg, speed_set_sha)
