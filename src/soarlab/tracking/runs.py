"""Pipeline runs read back from MLflow: their figures, tags and params as one record each (RunRecord),
newest first, with the sweep trials a pruning sweep stopped and the failed or killed runs kept apart (Runs).
What the decide commands and track's predicted figures (soarlab.prediction) read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from soarlab.domain import LEVELS
from soarlab.final_score import coefficient, normalized_accuracy
from soarlab.names.mlflow_tags import (
    CONFIG_NAME_TAG, KIND_TAG, MODEL_TAG, PARENT_TAG, SPEED_SET_TAG, SUBMITTED_TAG, SWEEP_TAG,
)
from soarlab.schema import ScoreGroup, SoarConfig
from soarlab.tracking.params import LoggedConfig
from soarlab.tracking.runs_view import DURATION_METRICS, SCORE_ORI

OFFICIAL = "official."     # metric prefix of a submission's platform figures
PRUNED_METRIC = "score.pruned"  # 1 on a run whose evaluate a pruning sweep stopped (stages/score.py)


@dataclass
class RunRecord:
    run_id: str
    name: str  # the configuration's name (CONFIG_NAME_TAG), without the scores the MLflow run name carries
    start_ms: int
    tags: dict[str, str]
    config: Mapping[str, str]  # the whole config, flattened as tracking.params.run_params does (LoggedConfig)
    metrics: dict[str, float]
    repeats: dict[str, list[float]] = field(default_factory=dict)  # per level: duration of each repeat

    def duration(self, level: str) -> float | None:
        """The scored duration (median of repeats) of a valid level, else None."""
        if self.metrics.get(f"bench.{level}_valid") != 1.0:
            return None
        return self.metrics.get(DURATION_METRICS[level])

    @property
    def valid(self) -> bool:
        return all(self.duration(level) for level in LEVELS)

    @property
    def ori(self) -> float | None:
        return self.metrics.get(SCORE_ORI)

    @property
    def ori_interval(self) -> tuple[float, float] | None:
        low, high = self.metrics.get("accuracy.ori_ci_low"), self.metrics.get("accuracy.ori_ci_high")
        return None if low is None or high is None else (low, high)

    @property
    def baseline(self) -> float:
        return float(self.config["model.baseline_accuracy"])

    @property
    def group(self) -> tuple[str, str]:
        """Runs are scored against each other only on the same model and speed set."""
        return self.tags.get(MODEL_TAG, ""), self.tags.get(SPEED_SET_TAG, "")

    @property
    def submitted(self) -> bool:
        return self.tags.get(SUBMITTED_TAG) == "true"

    def official(self, key: str) -> float | None:
        return self.metrics.get(OFFICIAL + key)

    def c_band(self, score_cfg: ScoreGroup) -> tuple[float, float] | None:
        """C at the low and high end of the run's ori interval (equal: C is settled)."""
        if self.ori_interval is None:
            return None
        cap, table, floor = score_cfg.accuracy_cap, score_cfg.c_table, score_cfg.c_floor
        return tuple(coefficient(normalized_accuracy(x, self.baseline, cap), table, floor) for x in self.ori_interval)


def fill_repeats(client, runs: Sequence[RunRecord]) -> None:
    """Read each run's per-repeat level durations (metric series `bench.<level>_repeat_duration_s`)."""
    for record in runs:
        for level in LEVELS:
            history = client.get_metric_history(record.run_id, f"bench.{level}_repeat_duration_s")
            record.repeats[level] = [m.value for m in sorted(history, key=lambda m: m.step)]


class Runs(list):
    """Pipeline runs with bench figures, newest first; `pruned`: the sweep trials a pruning sweep stopped
    early (soarlab.pruning), kept apart: they have no full bench, so nothing ranks or compares them."""

    def __init__(self):
        super().__init__()
        self.pruned: list[RunRecord] = []
        self.unfinished: list[tuple[RunRecord, str]] = []  # FAILED or KILLED runs, with that status


def load_runs(cfg: SoarConfig, model: str | None = None, speed_set: str | None = None, sweep: str | None = None,
              with_repeats: bool = True) -> tuple[object, str, Runs]:
    """(client, experiment id, pipeline runs with bench figures), newest first, filtered as asked."""
    from soarlab.tracking.store import open_store

    client, experiment_id = open_store(cfg)
    query = f"tags.`{MODEL_TAG}` = '{model}'" if model else ""
    found = client.search_runs([experiment_id], filter_string=query, max_results=5000, order_by=["attributes.start_time DESC"])
    runs = Runs()
    for run in found:
        tags = run.data.tags
        if speed_set and not tags.get(SPEED_SET_TAG, "").startswith(speed_set):
            continue
        if sweep and sweep not in (tags.get(PARENT_TAG), tags.get(SWEEP_TAG)):
            continue
        info = run.info
        name = tags.get(CONFIG_NAME_TAG) or info.run_name or info.run_id[:8]
        record = RunRecord(info.run_id, name, info.start_time or 0, dict(tags),
                           LoggedConfig(run), dict(run.data.metrics))
        if info.status in ("FAILED", "KILLED"):
            runs.unfinished.append((record, info.status))
        elif run.data.metrics.get(PRUNED_METRIC) == 1.0:
            runs.pruned.append(record)
        elif not tags.get(KIND_TAG) and "bench.S1_valid" in run.data.metrics:  # else a sweep's parent, the leaderboard's run
            runs.append(record)
    if with_repeats:
        fill_repeats(client, runs)
    return client, experiment_id, runs
