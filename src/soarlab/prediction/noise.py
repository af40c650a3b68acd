"""Run-to-run noise: how much a level's duration moves between runs of the same inputs on one machine.

Runs made one after another drift by more than the repeats of one run show (clocks, thermals,
allocator state, other tenants), so a verdict on one run per side from its repeats alone calls
identical configurations "faster". Two sources of between-run spread, in log space (ratios):
- reruns: several runs per side (`soarlab compare --rerun`), their run means the samples;
- the machine's noise record: the pooled between-run variance of log run means over every group
  of recorded runs with the same inputs (machine, model, speed set, config digest).
Each side's variance of one run is never less than its within-run part (repeat variance / repeats).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from soarlab.tracking.params import incidental_key
from soarlab.tracking.runs import RunRecord
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import MACHINE_TAG


def t_quantile(confidence: float, df: float) -> float:
    """The two-sided Student t quantile at `confidence` with `df` degrees of freedom. scipy loads here,
    not with this module: track imports this module for every run it logs, and an interval is needed
    only once a submission is recorded."""
    from scipy import stats

    return float(stats.t.ppf((1 + confidence) / 2, df))


def config_digest(params: dict[str, str], incidental: Sequence[str]) -> str:
    """sha256 of what a run tried: its params without the incidental ones (where or how it was watched)."""
    kept = {k: v for k, v in params.items() if not incidental_key(k, incidental)}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def inputs_key(run: RunRecord, incidental: Sequence[str]) -> tuple[str, str, str, str]:
    """Runs with equal keys differ only by run-to-run noise."""
    return (run.tags.get(MACHINE_TAG, ""), *run.group, config_digest(run.config, incidental))


def run_mean(run: RunRecord, level: str) -> float | None:
    """The mean duration of a valid level over its repeats (its scored duration without the series)."""
    if not run.duration(level):
        return None
    values = run.repeats.get(level) or []
    return statistics.fmean(values) if values else run.duration(level)


def within_log_var(run: RunRecord, level: str) -> tuple[float, float]:
    """(relative variance of the run's mean from its repeats alone, its df); (0, 0) under 2 repeats."""
    values = run.repeats.get(level) or []
    if len(values) < 2:
        return 0.0, 0.0
    return (statistics.stdev(values) / statistics.fmean(values)) ** 2 / len(values), len(values) - 1


@dataclass
class LevelNoise:
    cv: float      # between-run coefficient of variation of a run's mean duration
    df: int        # degrees of freedom of its pooled estimate: runs - groups
    runs: int
    groups: int


@dataclass
class NoiseRecord:
    machine: str
    levels: dict[str, LevelNoise]

    def describe(self) -> str:
        parts = ", ".join(f"{L} {n.cv:.1%}" for L, n in self.levels.items())
        any_level = next(iter(self.levels.values()))
        where = self.machine or "runs without a machine tag"
        return (f"noise record of {where}: between-run CV {parts} "
                f"(from {any_level.runs} runs in {any_level.groups} groups of equal inputs)")


def noise_record(runs: Sequence[RunRecord], machine: str, incidental: Sequence[str]) -> NoiseRecord | None:
    """The pooled between-run CV per level of `machine`'s runs; None without a group of 2+ runs."""
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for run in runs:
        if run.tags.get(MACHINE_TAG, "") == machine:
            groups[inputs_key(run, incidental)].append(run)
    levels = {}
    for level in LEVELS:
        squares, df, count, used = 0.0, 0, 0, 0
        for members in groups.values():
            logs = [math.log(m) for m in (run_mean(r, level) for r in members) if m]
            if len(logs) < 2:
                continue
            squares += statistics.variance(logs) * (len(logs) - 1)
            df, count, used = df + len(logs) - 1, count + len(logs), used + 1
        if df:
            levels[level] = LevelNoise(math.sqrt(squares / df), df, count, used)
    return NoiseRecord(machine, levels) if levels else None


def machine_records(runs: Sequence[RunRecord], incidental: Sequence[str]) -> list[NoiseRecord]:
    """The noise record of every machine the runs were made on (those with one)."""
    machines = sorted({r.tags.get(MACHINE_TAG, "") for r in runs})
    return [rec for rec in (noise_record(runs, m, incidental) for m in machines) if rec is not None]


@dataclass
class Side:
    """One side of a comparison at one level: log run means and the variance of one run's log mean."""
    mean_s: float
    log_mean: float
    var: float      # variance of one run's log mean
    df: float
    runs: int
    source: str     # reruns | noise record | within-run only


def side(runs: Sequence[RunRecord], level: str, record: NoiseRecord | None) -> Side | None:
    means = [m for m in (run_mean(r, level) for r in runs) if m]
    if len(means) != len(runs) or not means:
        return None
    logs = [math.log(m) for m in means]
    within = [within_log_var(r, level) for r in runs]
    floor, floor_df = statistics.fmean(v for v, _ in within), sum(df for _, df in within)
    if len(logs) >= 2:
        between, df, source = statistics.variance(logs), len(logs) - 1, "reruns"
    elif record is not None and level in record.levels:
        between, df, source = record.levels[level].cv ** 2, record.levels[level].df, "noise record"
    else:
        between, df, source = 0.0, 0, "within-run only"
    if floor > between:  # never less noise than the repeats of the runs themselves show
        between, df = floor, floor_df
    return Side(statistics.fmean(means), statistics.fmean(logs), between, df, len(logs), source)


def log_interval(a: Side, b: Side, confidence: float) -> tuple[float, float] | None:
    """Welch interval of log(B / A) from both sides' run means; None when neither has any spread estimate."""
    if not (a.df and b.df):
        return None  # a side with one run of one repeat and no record: its noise is unknown
    parts = [(s.var / s.runs, s.df) for s in (a, b)]
    total = sum(v for v, _ in parts)
    point = b.log_mean - a.log_mean
    if total == 0:
        return point, point  # spread measured, and none at all: the difference is exact
    df = total**2 / sum(v**2 / df for v, df in parts if v > 0)
    q = t_quantile(confidence, df)
    return point - q * math.sqrt(total), point + q * math.sqrt(total)
