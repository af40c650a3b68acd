"""score: the final SOAR score of this configuration (RULES.md 1), a pure function of files.

Reads reports/bench/metrics.json, reports/accuracy/metrics.json and reports/reference.json (the
best durations, looked up by the `reference` stage); writes reports/score.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from soarlab.atomic import write_json
from soarlab.errors import SoarError
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.final_score import final_score
from soarlab.paths import (
    ACCURACY_DIR, BENCH_DIR, METRICS_FILE, PRUNED_FILE, REFERENCE_FILE, SCORE_FILE, project_root,
)
from soarlab.schema import SoarConfig


def _read(path: Path) -> dict:
    if not path.is_file():
        raise SoarError(f"{path} not found", "run the stage that writes it first (dvc repro runs them in order)")
    return json.loads(path.read_text())


def best_durations(reference: dict, durations: dict[str, float]) -> dict[str, float]:
    """duration_best per level: the reference's; with best_recorded, this run's own where it is faster
    or nothing is recorded yet."""
    best = reference["durations"]
    if reference["source"] == "best_recorded":
        return {level: min(d for d in (best[level], durations[level]) if d) for level in LEVELS}
    return {level: best[level] for level in LEVELS}


def run(cfg: SoarConfig) -> None:
    root = project_root()
    reports = root / cfg.paths.reports
    bench = _read(reports / BENCH_DIR / METRICS_FILE)
    if bench.get("pruned"):  # a pruning sweep stopped evaluate (reports/bench/pruned.json): never scored, never best
        pruned = _read(reports / BENCH_DIR / PRUNED_FILE)
        write_json(reports / SCORE_FILE, {"valid": 0, "pruned": 1, "pruned_step": pruned["step"],
                                            "pruned_reason": pruned["reason"], "final": None})
        print(f"score: pruned ({pruned['reason']}); no score")
        return
    accuracy = _read(reports / ACCURACY_DIR / METRICS_FILE)
    durations = {level: bench.get(level_key(level, "duration_s")) for level in LEVELS}
    invalid = [level for level in LEVELS if not durations[level] or not bench.get(level_key(level, "valid"), 1)]
    base = {level_key(level, "duration_s"): durations[level] for level in LEVELS}
    if invalid:
        # An invalid level is reported, never scored (RULES.md 2: failed or short requests).
        result = {**base, "valid": 0, "invalid_levels": invalid, "final": None}
        if len(invalid) == len(LEVELS):  # nothing was measured: a failure, never a result to log
            write_json(reports / SCORE_FILE, result)
            raise SoarError("every bench level is invalid (their reasons: reports/bench/<level>.json); nothing to score",
                            "fix what failed the requests (the server's log: reports/logs/), then `dvc repro`")
        print(f"score: levels {', '.join(invalid)} are invalid (see reports/bench); no score")
    else:
        best = best_durations(_read(reports / REFERENCE_FILE), durations)
        score = final_score(durations, best, accuracy["ori_accuracy"], cfg.model.baseline_accuracy, cfg.score)
        result = {**score, **base, **{f"{level}_best_s": best[level] for level in LEVELS}, "valid": 1}
        print(f"score: final {score['final']} (C {score['C']}, ori {score['ori_accuracy']}; "
              + ", ".join(f"{level} {score[level]}" for level in LEVELS) + ")")
    write_json(reports / SCORE_FILE, result)
