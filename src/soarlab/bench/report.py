"""Files of reports/bench/: <level>.json, <level>.requests.jsonl, metrics.json (flat numbers), bench.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from soarlab.atomic import atomic_path, write_json, write_jsonl

LEVEL_ORDER = ("S1", "S8", "Smax")


def write_level(output_dir: str | Path, report: dict, rows: Sequence[dict]) -> None:
    out = Path(output_dir)
    write_jsonl(out / f"{report['level']}.requests.jsonl", rows)
    write_json(out / f"{report['level']}.json", report)


def _levels_present(out: Path, levels: Sequence[str] | None) -> list[str]:
    names = list(levels) if levels else [p.stem for p in out.glob("*.json") if p.stem != "metrics"]
    order = {n: i for i, n in enumerate(LEVEL_ORDER)}
    return sorted((n for n in names if (out / f"{n}.json").is_file()), key=lambda n: (order.get(n, 99), n))


def flat_metrics(reports: Sequence[dict]) -> dict:
    """{'S1_duration_s': .., 'S1_valid': 1, ...}; a figure that does not exist is left out (MLflow takes numbers)."""
    flat: dict[str, float] = {}
    for rep in reports:
        L = rep["level"]
        d = rep.get("diagnostics") or {}
        values = {
            "duration_s": rep.get("duration_s"),
            "valid": 1 if rep.get("valid") else 0,
            "measured_duration_s": rep.get("measured_duration_s"),
            "spread_s": rep.get("spread_s"),
            "repeats": rep.get("repeats"),
            "requests": rep.get("requests"),
            "dropped_rows": (rep.get("dataset") or {}).get("dropped_rows"),
            "request_throughput": d.get("request_throughput"),
            "output_throughput": d.get("output_throughput"),
            "mean_ttft_ms": (d.get("ttft_ms") or {}).get("mean"),
            "median_ttft_ms": (d.get("ttft_ms") or {}).get("median"),
            "p99_ttft_ms": (d.get("ttft_ms") or {}).get("p99"),
            "mean_tpot_ms": (d.get("tpot_ms") or {}).get("mean"),
            "median_tpot_ms": (d.get("tpot_ms") or {}).get("median"),
            "mean_itl_ms": (d.get("itl_ms") or {}).get("mean"),
            "p99_itl_ms": (d.get("itl_ms") or {}).get("p99"),
            "mean_e2e_latency_ms": (d.get("e2e_latency_ms") or {}).get("mean"),
            "p99_e2e_latency_ms": (d.get("e2e_latency_ms") or {}).get("p99"),
        }
        flat.update({f"{L}_{k}": float(v) for k, v in values.items() if v is not None})
    return flat


def plot(output_dir: Path, reports: Sequence[dict], rows_by_level: dict[str, list[dict]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_lat, ax_ttft, ax_dur) = plt.subplots(1, 3, figsize=(15, 4.5))
    names = [r["level"] for r in reports]
    for ax, key, title in ((ax_lat, "latency_s", "e2e latency (s)"), (ax_ttft, "ttft_s", "TTFT (s)")):
        data = [[row[key] for row in rows_by_level.get(n, []) if row.get(key) is not None and row.get("error") is None] or [0.0]
                for n in names]
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_title(f"{title} per request")
        ax.grid(alpha=0.3)
    durations = [r.get("measured_duration_s") or 0.0 for r in reports]
    spreads = [(r.get("spread_s") or 0.0) / 2 for r in reports]
    colors = ["tab:blue" if r.get("valid") else "tab:red" for r in reports]
    ax_dur.bar(names, durations, yerr=spreads, color=colors, capsize=4)
    for i, r in enumerate(reports):
        ax_dur.annotate("" if r.get("valid") else "invalid", (i, durations[i]), ha="center", va="bottom", color="tab:red")
    ax_dur.set_title("benchmark duration (s), median of repeats")
    ax_dur.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def write_summary(output_dir: str | Path, levels: Sequence[str] | None = None, make_plot: bool = True) -> dict:
    """metrics.json and bench.png from the level reports present in output_dir. Returns the flat metrics."""
    out = Path(output_dir)
    names = _levels_present(out, levels)
    reports = [json.loads((out / f"{n}.json").read_text()) for n in names]
    flat = flat_metrics(reports)
    write_json(out / "metrics.json", flat)
    if make_plot and reports:
        rows = {}
        for n in names:
            path = out / f"{n}.requests.jsonl"
            rows[n] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        plot(out, reports, rows, out / "bench.png")
    return flat
