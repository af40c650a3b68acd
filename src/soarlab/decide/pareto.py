"""The leaderboard's Pareto plot: what decides a submission, at a glance.

x is the raw accuracy (ori), not the normalized one, which the cap flattens at 100 for every run
above the baseline; the C bands (score.c_table at the model's baseline) are shaded behind it.
y is the performance (the weighted speed score). Runs of one configuration (soarlab.prediction.noise's
config digest, on one model and speed set) are one point, labelled with what differs from the best run
(`quant=gptq_w4`; the best one `best`) and their count. Error bars:
x the ori bootstrap interval, y the performance interval from each level's run-to-run noise (the
noise record, never below the repeats; with several runs, their own spread if larger). The front
(no other point both more accurate and faster) is drawn. Labels are moved apart by adjustText.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from soarlab.prediction.noise import NoiseRecord, config_digest, side
from soarlab.schema import ScoreGroup, SoarConfig
from soarlab.tracking.runs import RunRecord
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import MACHINE_TAG

_LABEL_CHARS = 40


@dataclass
class Point:
    label: str
    runs: int
    ori: float
    ori_low: float
    ori_high: float
    performance: float
    perf_low: float
    perf_high: float
    on_front: bool = False


def _performance_sd(run: RunRecord, row: dict, cfg: SoarConfig, noise: dict[str, NoiseRecord]) -> float:
    """Standard deviation of one run's performance: a level's speed score moves as 1/duration, so its
    relative error is the level's log-duration noise."""
    record = noise.get(run.tags.get(MACHINE_TAG, ""))
    terms = []
    for level in LEVELS:
        found = side([run], level, record)
        sd = math.sqrt(found.var) if found else 0.0
        terms.append(cfg.score.weights[level] * (row[f"{level}_speed"] or 0.0) * sd)
    return math.hypot(*terms)


def points(table: list[dict], runs: Sequence[RunRecord], cfg: SoarConfig, noise: dict[str, NoiseRecord]) -> list[Point]:
    """One point per configuration with both figures, its runs merged; the front marked."""
    by_id = {r.run_id: r for r in runs}
    incidental = cfg.decide.incidental_params
    groups: dict[tuple, list[tuple[dict, RunRecord]]] = defaultdict(list)
    for row in table:
        run = by_id[row["run_id"]]
        if row["performance"] is not None and row["ori"] is not None:
            groups[(*run.group, config_digest(run.config, incidental))].append((row, run))
    z = statistics.NormalDist().inv_cdf((1 + cfg.decide.confidence) / 2)
    found = []
    for members in groups.values():
        rows = [row for row, _ in members]
        perf = [row["performance"] for row in rows]
        one_run = statistics.fmean(_performance_sd(run, row, cfg, noise) for row, run in members)
        between = statistics.stdev(perf) if len(perf) > 1 else 0.0
        half = z * max(one_run, between) / math.sqrt(len(perf))
        name = rows[0]["differs_from_best"] or ("best" if rows[0]["rank"] == 1 else rows[0]["run"])
        name = name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"
        ori = statistics.fmean(row["ori"] for row in rows)
        lows = [row["ori_low"] if row["ori_low"] is not None else row["ori"] for row in rows]
        highs = [row["ori_high"] if row["ori_high"] is not None else row["ori"] for row in rows]
        mean_perf = statistics.fmean(perf)
        found.append(Point(f"#{rows[0]['rank']} {name}" + (f" ×{len(rows)}" if len(rows) > 1 else ""), len(rows), ori,
                           statistics.fmean(lows), statistics.fmean(highs), mean_perf, mean_perf - half, mean_perf + half))
    for p in found:
        p.on_front = not any(q.ori >= p.ori and q.performance >= p.performance and (q.ori, q.performance) != (p.ori, p.performance)
                             for q in found)
    return found


def _band_spans(score_cfg: ScoreGroup, baseline: float, left: float, right: float) -> list[tuple[float, float, float]]:
    """(low, high, C) in raw accuracy from `left` to `right`: c_floor below every band of score.c_table
    (at `baseline`), then each band."""
    bands = sorted(score_cfg.c_table, key=lambda b: b.above)
    edges = [min(left, bands[0].above * baseline / 100)] + [b.above * baseline / 100 for b in bands] + [right]
    values = [score_cfg.c_floor] + [b.C for b in bands]
    return [(edges[i], edges[i + 1], c) for i, c in enumerate(values)]


def _separate(texts, renderer) -> None:
    """Move each label down past any earlier one it still overlaps (adjustText minimizes overlaps; this
    makes sure none is left)."""
    placed = []
    for text in texts:
        box = text.get_window_extent(renderer)
        while any(box.overlaps(other) for other in placed):
            x, y = text.get_position()
            inverse = text.axes.transData.inverted()
            step = inverse.transform((0, 0))[1] - inverse.transform((0, box.height + 2))[1]
            text.set_position((x, y + step))
            box = text.get_window_extent(renderer)
        placed.append(box)


def draw(found: list[Point], target: Path, score_cfg: ScoreGroup, baseline: float) -> list[tuple[float, float, float, float]]:
    """Write the plot to `target` (atomically); return the labels' boxes in pixels (x0, y0, x1, y1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from adjustText import adjust_text

    from soarlab.atomic import atomic_path

    fig, ax = plt.subplots(figsize=(10, 6))
    left = min(p.ori_low for p in found)
    right = max(baseline * score_cfg.accuracy_cap / 100, max(p.ori_high for p in found))
    left, right = left - 0.02 * (right - left + 1), right + 0.02 * (right - left + 1)
    spans = _band_spans(score_cfg, baseline, left, right)
    shades = plt.get_cmap("RdYlGn")
    for i, (low, high, c) in enumerate(spans):
        what = f"ori below {high:.1f}" if i == 0 else f"ori {low:.1f} to {high:.1f}"
        ax.axvspan(low, high, color=shades(0.15 + 0.75 * i / (len(spans) - 1)), alpha=0.35, linewidth=0,
                   label=f"C = {c:g}: {what}")
    front = sorted((p for p in found if p.on_front), key=lambda p: p.ori)
    ax.plot([p.ori for p in front], [p.performance for p in front], color="tab:orange", zorder=2, label="Pareto front")
    for p in found:
        ax.errorbar(p.ori, p.performance, xerr=[[p.ori - p.ori_low], [p.ori_high - p.ori]],
                    yerr=[[p.performance - p.perf_low], [p.perf_high - p.performance]],
                    fmt="o", color="tab:orange" if p.on_front else "tab:blue", ecolor="grey", elinewidth=1, capsize=3, zorder=3)
    texts = [ax.text(p.ori, p.performance, p.label, fontsize=8, zorder=4) for p in found]
    ax.set_xlim(spans[0][0], right)
    adjust_text(texts, ax=ax, arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    _separate(texts, renderer)
    ax.set_xlabel(f"raw accuracy ori (%), bootstrap interval; C bands at the baseline {baseline:g}%")
    ax.set_ylabel("performance (weighted speed score), run-to-run noise")
    ax.set_title("SOAR Lab runs: speed against accuracy (one point per configuration, ×n runs)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.canvas.draw()
    boxes = [tuple(t.get_window_extent(renderer).extents) for t in texts]
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return boxes
