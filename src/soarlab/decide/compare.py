"""`soarlab compare A B`: is B faster or slower than A at each level, beyond run-to-run noise?

Per level, the difference of mean durations over the repeats (B - A) with a Welch t interval
(scipy.stats.ttest_ind, unequal variances) at `decide.confidence`: wholly below 0 is "faster",
wholly above 0 "slower", otherwise "within noise". With fewer than 2 repeats on a side the noise
is unknown ("noise unknown"). A difference under `decide.compare.negligible_pct` of A's mean is
"within noise" whatever the interval says. For accuracy, each run's bootstrap interval of ori gives the C band at
both ends: C is settled when both ends give the same C.

Exit codes: 0 B is better (faster somewhere, slower nowhere, C not lower), 1 no difference beyond
noise (or noise unknown), 3 B is worse (slower somewhere and faster nowhere, or a lower C), 4 mixed
(faster at one level, slower at another), 2 bad input.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass

from scipy import stats

from soarlab.decide.runs import RunRecord
from soarlab.domain import LEVELS

EXIT_BETTER, EXIT_SAME, EXIT_WORSE, EXIT_MIXED = 0, 1, 3, 4


@dataclass
class LevelDiff:
    level: str
    mean_a_s: float | None
    mean_b_s: float | None
    difference_s: float | None
    low_s: float | None
    high_s: float | None
    repeats: tuple[int, int]
    verdict: str  # faster | slower | within noise | noise unknown | not comparable


def level_difference(a: RunRecord, b: RunRecord, level: str, confidence: float, negligible_pct: float) -> LevelDiff:
    xa, xb = a.repeats.get(level) or [], b.repeats.get(level) or []
    counts = (len(xa), len(xb))
    if not a.duration(level) or not b.duration(level) or not xa or not xb:
        return LevelDiff(level, None, None, None, None, None, counts, "not comparable")
    mean_a, mean_b = statistics.fmean(xa), statistics.fmean(xb)
    diff = mean_b - mean_a
    if min(counts) < 2:
        return LevelDiff(level, mean_a, mean_b, diff, None, None, counts, "noise unknown")
    if statistics.pvariance(xa) == 0 and statistics.pvariance(xb) == 0:
        low = high = diff  # no spread at all: the difference is exact
    else:
        low, high = stats.ttest_ind(xb, xa, equal_var=False).confidence_interval(confidence)
    verdict = "slower" if low > 0 else "faster" if high < 0 else "within noise"
    if abs(diff) < negligible_pct / 100 * mean_a:
        verdict = "within noise"
    return LevelDiff(level, mean_a, mean_b, diff, float(low), float(high), counts, verdict)


def compare(a: RunRecord, b: RunRecord, cfg) -> dict:
    score_cfg, confidence = cfg.score, float(cfg.decide.confidence)
    levels = [level_difference(a, b, level, confidence, float(cfg.decide.compare.negligible_pct)) for level in LEVELS]
    bands = {"A": a.c_band(score_cfg), "B": b.c_band(score_cfg)}
    settled = {k: v is not None and v[0] == v[1] for k, v in bands.items()}
    if bands["A"] is None or bands["B"] is None:
        accuracy = "C not comparable: a run has no ori interval (accuracy stage without bootstrap)"
        c_change = 0
    elif settled["A"] and settled["B"]:
        c_change = (bands["B"][0] > bands["A"][0]) - (bands["B"][0] < bands["A"][0])
        accuracy = {0: f"C settled in the same band ({bands['A'][0]})", 1: f"C settled in a better band ({bands['A'][0]} -> {bands['B'][0]})",
                    -1: f"C settled in a worse band ({bands['A'][0]} -> {bands['B'][0]})"}[c_change]
    else:
        c_change = 0
        loose = " and ".join(k for k in ("A", "B") if not settled[k])
        accuracy = f"C not settled for {loose}: its ori interval crosses a band boundary (A {bands['A']}, B {bands['B']})"
    verdicts = {d.verdict for d in levels}
    faster, slower = "faster" in verdicts, "slower" in verdicts
    if faster and slower:
        code = EXIT_MIXED
    elif slower or c_change < 0:
        code = EXIT_WORSE
    elif faster or c_change > 0:
        code = EXIT_BETTER
    else:
        code = EXIT_SAME
    return {"a": a.run_id, "b": b.run_id, "a_name": a.name, "b_name": b.name, "confidence": confidence,
            "levels": [asdict(d) for d in levels], "accuracy": accuracy, "C_band_a": bands["A"], "C_band_b": bands["B"],
            "exit_code": code}


def _describe(d: dict) -> str:
    if d["difference_s"] is None:
        return f"{d['level']:>5}: not comparable (a level without a valid duration)"
    text = f"{d['level']:>5}: A {d['mean_a_s']:.3f} s, B {d['mean_b_s']:.3f} s, B-A {d['difference_s']:+.3f} s"
    if d["low_s"] is None:
        return text + f" -> noise unknown (repeats {d['repeats'][0]}/{d['repeats'][1]}; run with bench.repeats >= 3)"
    return text + f" [{d['low_s']:+.3f}, {d['high_s']:+.3f}] -> {d['verdict']}"


def compare_cli(args) -> int:
    from soarlab.decide.calibration import by_predicted_final, fit
    from soarlab.decide.runs import decide_config, load_runs, resolve

    cfg = decide_config(args)
    _, _, runs = load_runs(cfg)
    calibration = fit(runs, cfg)
    rank = by_predicted_final(calibration, cfg.score)
    a, b = resolve(args.a, runs, rank), resolve(args.b, runs, rank)
    if a.run_id == b.run_id:
        print(f"soarlab: note: {args.a} and {args.b} are the same run {a.run_id[:8]}", file=sys.stderr)
    result = compare(a, b, cfg)
    if args.json:
        print(json.dumps(result, indent=2))
        return result["exit_code"]
    print(f"A = {a.name} ({a.run_id[:8]})\nB = {b.name} ({b.run_id[:8]})")
    print(f"duration B - A per level, {result['confidence']:.0%} Welch t interval over the repeats:")
    for d in result["levels"]:
        print(_describe(d))
    print(f"accuracy: {result['accuracy']}")
    verdict = {EXIT_BETTER: "B is better", EXIT_SAME: "no difference beyond noise", EXIT_WORSE: "B is worse",
               EXIT_MIXED: "mixed: B is faster at one level and slower at another"}[result["exit_code"]]
    print(f"verdict: {verdict} (exit {result['exit_code']})")
    return result["exit_code"]
