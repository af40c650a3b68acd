"""From local figures to a prediction of the official ones, calibrated on recorded submissions.

Durations, per level, in log space (ratios multiply, and a ratio's error is relative):
- one submission: the ratio official/local of that run; its uncertainty is the run's own noise:
  the between-run CV of its machine's noise record, never less than its repeats show
  (soarlab.prediction.noise);
- two or more: the geometric mean of the ratios, with the t interval of the mean log ratio
  (n-1 degrees of freedom).
A run's predicted official duration is local x ratio; its interval adds, in log space, the
calibration's error and the run's own noise likewise (Welch-Satterthwaite degrees of freedom).

Accuracy: an offset official - local ori; one submission: its local bootstrap interval's half
width is the uncertainty; more: mean offset with its t interval. A run's predicted ori adds the
offset; the two half widths add in quadrature.

Speed scores, C and final come from `soarlab.final_score.final_score` at the point and at the
two ends (slow durations with low ori; fast durations with high ori): final only grows with speed
and accuracy, so those bound it. duration_best is `decide.calibration.official_best`, else the
fastest recorded official duration, and never slower than the run itself (RULES.md 1).
Without any submission the calibration is the identity and duration_best is the fastest local run
on the same model and speed set: the prediction is then the local score with its noise.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Sequence

from soarlab.prediction.noise import NoiseRecord, machine_records, side, t_quantile
from soarlab.schema import ScoreGroup, SoarConfig
from soarlab.tracking.runs import RunRecord
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import MACHINE_TAG
from soarlab.final_score import final_score

Interval = tuple[float, float, float]  # (point, low, high)


@dataclass
class LevelFit:
    ratio: float             # official / local duration
    log_se: float            # standard error of log(ratio)
    df: float                # its degrees of freedom (inf: no error term)
    confidence: float

    @property
    def interval(self) -> tuple[float, float]:
        q = t_quantile(self.confidence, self.df) if self.log_se > 0 else 0.0
        return self.ratio * math.exp(-q * self.log_se), self.ratio * math.exp(q * self.log_se)


@dataclass
class Calibration:
    levels: dict[str, LevelFit]
    offset: float                 # official - local ori, points
    offset_half: float            # half width of its interval
    submissions: int
    confidence: float
    best: dict[tuple[str, str], dict[str, float]]  # duration_best per run group (model, speed set)
    noise: dict[str, NoiseRecord] = field(default_factory=dict)  # between-run noise record per machine
    warnings: list[str] = field(default_factory=list)


def _welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of (standard error, df) terms."""
    total = sum(se**2 for se, _ in parts)
    denominator = sum(se**4 / df for se, df in parts if se > 0 and math.isfinite(df))
    return total**2 / denominator if denominator > 0 else math.inf


def run_log_se(run: RunRecord, level: str, noise: dict[str, NoiseRecord]) -> tuple[float, float]:
    """(relative standard error of the run's level duration, its df): the between-run noise of its
    machine's record, never less than its own repeats show; (0, inf) with neither."""
    found = side([run], level, noise.get(run.tags.get(MACHINE_TAG, "")))
    if found is None or not found.df:
        return 0.0, math.inf
    return math.sqrt(found.var), found.df


def _ori_half(run: RunRecord) -> float:
    interval = run.ori_interval
    return (interval[1] - interval[0]) / 2 if interval else 0.0


def fit(runs: Sequence[RunRecord], cfg: SoarConfig, use_submissions: bool = True) -> Calibration:
    """The calibration from the submitted runs among `runs` (the identity without them, or when told not to)."""
    conf = cfg.decide.confidence
    noise = {record.machine: record for record in machine_records(runs, cfg.decide.incidental_params)}
    submitted = [r for r in runs if r.submitted and r.valid] if use_submissions else []
    if not submitted:
        groups = {r.group for r in runs}
        best = {g: {L: min(r.duration(L) for r in runs if r.group == g and r.valid) for L in LEVELS}
                for g in groups if any(r.valid for r in runs if r.group == g)}
        return Calibration({L: LevelFit(1.0, 0.0, math.inf, conf) for L in LEVELS}, 0.0, 0.0, 0, conf, best, noise)
    levels = {}
    for level in LEVELS:
        logs = [math.log(r.official(level_key(level, "duration_s")) / r.duration(level)) for r in submitted]
        if len(logs) == 1:
            se, df = run_log_se(submitted[0], level, noise)
        else:
            se, df = statistics.stdev(logs) / math.sqrt(len(logs)), len(logs) - 1
        levels[level] = LevelFit(math.exp(statistics.fmean(logs)), se, df, conf)
    offsets = [r.official("ori_accuracy") - r.ori for r in submitted]
    if len(offsets) == 1:
        half = _ori_half(submitted[0])
    else:
        half = t_quantile(conf, len(offsets) - 1) * statistics.stdev(offsets) / math.sqrt(len(offsets))
    configured = cfg.decide.calibration.official_best
    recorded = {L: configured[L] or min(r.official(level_key(L, "duration_s")) for r in submitted) for L in LEVELS}
    calibration = Calibration(levels, statistics.fmean(offsets), half, len(submitted), conf,
                              {g: recorded for g in {r.group for r in runs}}, noise)
    calibration.warnings = level_warnings(submitted, levels, cfg.decide.calibration.level_ratio_tolerance)
    return calibration


def level_warnings(submitted: Sequence[RunRecord], levels: dict[str, LevelFit], tolerance: float) -> list[str]:
    """A warning per level whose official/local ratio, relative to S1's, is off by more than `tolerance`."""
    warnings = []
    for level in LEVELS[1:]:
        factor = levels[level].ratio / levels[LEVELS[0]].ratio
        if 1 / tolerance <= factor <= tolerance:
            continue
        local = math.exp(statistics.fmean(math.log(r.duration(level) / r.duration(LEVELS[0])) for r in submitted))
        official = local * factor
        inverted = (local < 1) != (official < 1)
        heavier = factor > 1
        warnings.append(
            f"{level} takes {official:.2f}x the S1 duration officially but {local:.2f}x locally "
            f"({factor:.1f}x off{', inverted' if inverted else ''}; tolerance decide.calibration.level_ratio_tolerance="
            f"{tolerance:g}): local gains at {level} may not carry over. Make the speed set load {level} like the "
            + ("official one: longer inputs and outputs (bench.dataset.profile, e.g. long-mix, RULES.md 2) and as many "
               "requests as it sends (bench.dataset.num_requests)" if heavier else
               "official one: shorter inputs or fewer requests (bench.dataset.profile, bench.dataset.num_requests)")
        )
    return warnings


@dataclass
class Prediction:
    durations: dict[str, Interval]
    speeds: dict[str, Interval]
    ori: Interval
    normalized_accuracy: float
    C: Interval
    performance: float
    final: Interval
    calibrated: bool

    @property
    def c_settled(self) -> bool:
        return self.C[1] == self.C[2]


def predict(calibration: Calibration, run: RunRecord, score_cfg: ScoreGroup) -> Prediction | None:
    """Predicted official figures of `run` with intervals; None when a level is invalid or ori is missing."""
    best = calibration.best.get(run.group)
    if not run.valid or run.ori is None or best is None:
        return None
    durations = {}
    for level, fit_ in calibration.levels.items():
        se_run, df_run = run_log_se(run, level, calibration.noise)
        parts = [(fit_.log_se, fit_.df), (se_run, df_run)]
        se = math.sqrt(sum(s**2 for s, _ in parts))
        q = t_quantile(calibration.confidence, _welch_df(parts)) if se > 0 else 0.0
        point = run.duration(level) * fit_.ratio
        durations[level] = (point, point * math.exp(-q * se), point * math.exp(q * se))
    half = math.hypot(calibration.offset_half, _ori_half(run))
    ori_point = min(max(run.ori + calibration.offset, 0.0), 100.0)
    ori = (ori_point, max(ori_point - half, 0.0), min(ori_point + half, 100.0))

    def score(end: int, ori_value: float) -> dict:
        chosen = {L: durations[L][end] for L in LEVELS}
        return final_score(chosen, {L: min(best[L], chosen[L]) for L in LEVELS}, ori_value, run.baseline, score_cfg)

    mid, low, high = score(0, ori[0]), score(2, ori[1]), score(1, ori[2])  # slow + low ori bounds it below
    return Prediction(
        durations, {L: (mid[L], low[L], high[L]) for L in LEVELS}, ori, mid["normalized_accuracy"],
        (mid["C"], low["C"], high["C"]), mid["performance"], (mid["final"], low["final"], high["final"]),
        calibration.submissions > 0,
    )


def by_predicted_final(calibration: Calibration, score_cfg: ScoreGroup):
    """run -> its predicted final (None without one): what `best` means."""
    def final(run: RunRecord) -> float | None:
        prediction = predict(calibration, run, score_cfg)
        return prediction.final[0] if prediction else None

    return final


def log_predictions(cfg: SoarConfig, run_ids: Sequence[str] | None = None) -> None:
    """Store each run's predicted official figures as `predicted.*` metrics (step = submissions used).
    Without a submission there is nothing to predict beyond the local score, so nothing is logged."""
    from mlflow.entities import Metric

    from soarlab.tracking.runs import fill_repeats, load_runs

    client, _, runs = load_runs(cfg, with_repeats=False)
    if not any(r.submitted for r in runs):
        return
    targets = [r for r in runs if run_ids is None or r.run_id in run_ids]
    fill_repeats(client, {r.run_id: r for r in [*targets, *(r for r in runs if r.submitted)]}.values())
    calibration = fit(runs, cfg)
    now = int(time.time() * 1000)
    for run in targets:
        prediction = predict(calibration, run, cfg.score)
        if prediction is None:
            continue
        figures = {**{level_key(L, "duration_s"): prediction.durations[L] for L in LEVELS},
                   **{L: prediction.speeds[L] for L in LEVELS}, "ori_accuracy": prediction.ori, "C": prediction.C,
                   "final": prediction.final}
        metrics = [Metric(f"predicted.{key}{suffix}", float(value), now, calibration.submissions)
                   for key, interval in figures.items() for suffix, value in zip(("", "_low", "_high"), interval)]
        client.log_batch(run.run_id, metrics=metrics)
