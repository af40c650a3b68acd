"""Pipeline runs as the decide commands read them from MLflow, and how a user names one.

A run is named by its MLflow run id (or a unique prefix of 8+ characters), its DVC experiment
name, `best` (the top of the leaderboard) or `submitted` (the latest run with official figures).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from soarlab.errors import SoarError
from soarlab.domain import LEVELS
from soarlab.metrics.scoring import coefficient, normalized_accuracy
from soarlab.schema import ScoreGroup, SoarConfig
from soarlab.tracking.params import LoggedConfig
from soarlab.tracking.runs_view import DURATION_METRICS, SCORE_ORI
from soarlab.tracking.tags import CONFIG_NAME_TAG, PRUNED_TAG, SPEED_SET_TAG

SUBMITTED_TAG = "soarlab.submitted"
SUBMITTED_AT_TAG = "soarlab.submission.recorded_at"
KIND_TAG = "soarlab.kind"  # set on runs that are not pipeline executions (the leaderboard's own run)
OFFICIAL = "official."     # metric prefix of a submission's platform figures
PRUNED_METRIC = "score.pruned"  # 1 on a run whose evaluate a pruning sweep stopped (stages/score.py)
_RUN_ID = re.compile(r"^[0-9a-f]{8,32}$")


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
        return self.tags.get("soarlab.model", ""), self.tags.get(SPEED_SET_TAG, "")

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


def decide_config(args):
    """The composed config of a decide command: its Hydra overrides, then --experiment."""
    from soarlab.config import compose

    cfg = compose(args.overrides)
    if getattr(args, "experiment", None):
        cfg.tracking.experiment = args.experiment
    return cfg


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
    query = f"tags.`soarlab.model` = '{model}'" if model else ""
    found = client.search_runs([experiment_id], filter_string=query, max_results=5000, order_by=["attributes.start_time DESC"])
    runs = Runs()
    for run in found:
        tags = run.data.tags
        if speed_set and not tags.get(SPEED_SET_TAG, "").startswith(speed_set):
            continue
        if sweep and sweep not in (tags.get("mlflow.parentRunId"), tags.get("soarlab.sweep")):
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


def _refuse_pruned(ref: str, runs: Sequence[RunRecord]) -> None:
    """Say so when `ref` names a pruned sweep trial (Runs.pruned), rather than that no such run exists."""
    pruned = [r for r in getattr(runs, "pruned", [])
              if (_RUN_ID.match(ref) and r.run_id.startswith(ref)) or r.tags.get("dvc.experiment") == ref]
    if pruned:
        why = pruned[0].tags.get(PRUNED_TAG, "stopped early")
        raise SoarError(f"run {ref!r} is a sweep trial that was pruned ({why}): it has no full bench",
                        "name a trial that finished (soarlab leaderboard lists them)")


def _refuse_unfinished(ref: str, runs: Sequence[RunRecord]) -> None:
    """Say a run is FAILED or KILLED, rather than that no such run exists."""
    for record, status in getattr(runs, "unfinished", []):
        if (_RUN_ID.match(ref) and record.run_id.startswith(ref)) or record.tags.get("dvc.experiment") == ref:
            raise SoarError(f"run {ref!r} is {status}: it has no result to compare",
                            "name a finished run (soarlab leaderboard lists them); the MLflow UI shows why it failed")


def resolve(ref: str, runs: Sequence[RunRecord], rank: Callable[[RunRecord], float | None]) -> RunRecord:
    """The run a user means by `ref`: a run id (or 8+ character prefix), a DVC experiment name, best, submitted."""
    if not runs:
        _refuse_pruned(ref, runs)
        _refuse_unfinished(ref, runs)
        raise SoarError("no pipeline runs in this MLflow experiment", "run the pipeline first (dvc repro), or pick the experiment with --experiment")
    if ref == "best":
        ranked = [(rank(r), r) for r in runs if rank(r) is not None]
        if not ranked:
            raise SoarError("no run has a final score (every run has an invalid level)", "fix the bench stage (see reports/bench) and re-run")
        return max(ranked, key=lambda pair: pair[0])[1]
    if ref == "submitted":
        submitted = [r for r in runs if r.submitted]
        if not submitted:
            raise SoarError("no run is recorded as submitted", "record one with `soarlab record-submission RUN --S1 .. --S8 .. --Smax .. --accuracy ..`")
        return max(submitted, key=lambda r: r.tags.get(SUBMITTED_AT_TAG, ""))
    by_id = [r for r in runs if _RUN_ID.match(ref) and r.run_id.startswith(ref)]
    if len(by_id) == 1:
        return by_id[0]
    by_exp = [r for r in runs if r.tags.get("dvc.experiment") == ref]
    if by_exp:
        return by_exp[0]  # newest first
    if not by_id:
        _refuse_pruned(ref, runs)
        _refuse_unfinished(ref, runs)
    what = f"{len(by_id)} runs start with {ref!r}" if by_id else f"no run {ref!r} in this experiment"
    raise SoarError(what, "give an MLflow run id (or 8+ of its first characters), a DVC experiment name (dvc exp show), best or submitted")
