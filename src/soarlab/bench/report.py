"""Files of reports/bench/: <level>.json, <level>.requests.jsonl, metrics.json (flat numbers), bench.png; the printout.

What each figure means, and which go to metrics.json, the printout and the plot, is the metric
table's (bench/metrics.py); what the server and GPU did during a level, bench/server_metrics.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from soarlab.atomic import atomic_path, write_json, write_jsonl
from soarlab.bench.metrics import METRICS, PER_REQUEST, TABLE, flat_metrics, value_of
from soarlab.bench import server_metrics
from soarlab.bench.results import LevelReport
from soarlab.domain import LEVELS
from soarlab.paths import METRICS_FILE, level_report, level_requests


def write_level(output_dir: str | Path, report: LevelReport, rows: Sequence[dict]) -> None:
    out = Path(output_dir)
    write_jsonl(level_requests(out, report.level), rows)
    write_json(level_report(out, report.level), report.to_dict())


def read_level(path: str | Path) -> LevelReport:
    return LevelReport.from_dict(json.loads(Path(path).read_text()))


def _levels_present(out: Path, levels: Sequence[str] | None) -> list[str]:
    names = list(levels) if levels else [p.stem for p in out.glob("*.json") if p.name != METRICS_FILE]
    order = {n: i for i, n in enumerate(LEVELS)}
    return sorted((n for n in names if level_report(out, n).is_file()), key=lambda n: (order.get(n, 99), n))


def plot(reports: Sequence[LevelReport], rows_by_level: dict[str, list[dict]], target: Path) -> None:
    """A box plot per per-request metric (TTFT, e2e latency), and the durations with their spread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PER_REQUEST) + 1, figsize=(5 * (len(PER_REQUEST) + 1), 4.5))
    names = [r.level for r in reports]
    for ax, metric in zip(axes, PER_REQUEST):
        key = metric.column
        data = [[row[key] for row in rows_by_level.get(n, []) if row.get(key) is not None and row.get("error") is None] or [0.0]
                for n in names]
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_title(f"{metric.label} (s) per request")
        ax.grid(alpha=0.3)
    ax_dur = axes[-1]
    durations = [r.measured_duration_s or 0.0 for r in reports]
    spreads = [(r.spread_s or 0.0) / 2 for r in reports]
    colors = ["tab:blue" if r.valid else "tab:red" for r in reports]
    ax_dur.bar(names, durations, yerr=spreads, color=colors, capsize=4)
    for i, r in enumerate(reports):
        ax_dur.annotate("" if r.valid else "invalid", (i, durations[i]), ha="center", va="bottom", color="tab:red")
    duration = METRICS["measured_duration_s"]
    ax_dur.set_title(f"{duration.label} ({duration.unit}), median of repeats")
    ax_dur.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def write_summary(output_dir: str | Path, levels: Sequence[str] | None = None, make_plot: bool = True) -> dict:
    """metrics.json and bench.png from the level reports present in output_dir. Returns the flat metrics."""
    out = Path(output_dir)
    names = _levels_present(out, levels)
    reports = [read_level(level_report(out, n)) for n in names]
    flat = flat_metrics(reports)
    for report in reports:
        flat |= server_metrics.flat(report.level, report.server_metrics)
    write_json(out / METRICS_FILE, flat)
    if make_plot and reports:
        rows = {}
        for n in names:
            path = level_requests(out, n)
            rows[n] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        plot(reports, rows, out / "bench.png")
    return flat


def _shown(report: LevelReport) -> str:
    """The table's `shown` figures, e.g. 'request throughput 2.00 req/s, mean TTFT 1.00 ms'."""
    parts = []
    for metric in TABLE:
        for stat in metric.shown:
            value = value_of(metric, report, stat)
            if value is None:
                continue
            parts.append(f"{stat} {metric.label} {value:.2f} {metric.unit}".lstrip())
    return ", ".join(parts)


def print_level(report: LevelReport, output_dir) -> None:
    name = report.level
    if report.valid:
        spread = "" if report.spread_s is None else f" (spread {report.spread_s:.2f} s over {report.repeats} runs)"
        print(f"{name}: benchmark duration {report.duration_s:.2f} s{spread}, {_shown(report)} -> {output_dir}/{name}.json")
    else:
        print(f"{name}: INVALID, not scored: " + " | ".join(report.invalid_reasons))
    if report.dataset and report.dataset.dropped_rows:
        print(f"{report.dataset.dropped_rows} rows dropped (prompt or output under {report.method.min_tokens} tokens)")
    for note in report.notes:
        print(f"note: {note}")
    for line in server_metrics_lines(report):
        print(line)


def server_metrics_lines(report: LevelReport, said: set[str] | None = None) -> list[str]:
    """What the server reported during the level, and what could not be sampled (soarlab.bench.server_metrics).
    `said`: the reasons this run already gave, for a run of several levels: a source that does not exist
    here (NVML on a CPU, /metrics of transformers serve) is missing at every level, so it is said once,
    for the run, and added to `said`."""
    sampled = report.server_metrics.get("prometheus") or {}
    lines = [f"{report.level} server: " + ", ".join(f"{k} mean {v['mean']:.2f} max {v['max']:.2f}" for k, v in sampled.items())] \
        if sampled else []
    spec = report.server_metrics.get("spec")
    if spec:
        rate = "" if spec["accept_rate"] is None else f", {100 * spec['accept_rate']:.0f}% of drafted tokens accepted"
        lines.append(f"{report.level} speculative decoding: {spec['accept_length']:.2f} tokens per verification{rate}")
    skipped = report.server_metrics.get("skipped") or []
    if said is None:
        return lines + [f"{report.level} skipped: {why}" for why in skipped]
    new = [why for why in dict.fromkeys(skipped) if why not in said]
    said.update(new)
    return lines + [f"all levels skipped: {why}" for why in new]
