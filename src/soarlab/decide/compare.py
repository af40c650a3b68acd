"""`soarlab compare A B [--rerun N]`: is B faster or slower than A at each level, beyond run-to-run noise?

Per level, a Welch t interval at `decide.confidence` on log(B / A) of the run means (soarlab.prediction.noise),
shown in seconds relative to A's mean: wholly below 0 is "faster", wholly above 0 "slower", otherwise
"within noise". The noise of a side is, in this order: the spread of its reruns (`--rerun N` runs both
configurations N times, interleaved A B A B, each a fresh `dvc exp run` with its own server start,
tagged `soarlab.compare`); else the machine's noise record (between-run CV from recorded runs with
the same inputs); else its repeats alone, said to be so (identical runs can then differ). Never less
than the runs' own within-run spread. Without any estimate the noise is unknown. A difference under
`decide.compare.negligible_pct` of A's mean is "within noise" whatever the interval says (a floor).
For accuracy, each run's bootstrap interval of ori gives the C band at both ends: C is settled when
both ends give the same C.

Exit codes: 0 B is better (faster somewhere, slower nowhere, C not lower), 1 no difference beyond
noise (or noise unknown), 3 B is worse (slower somewhere and faster nowhere, or a lower C), 4 mixed
(faster at one level, slower at another), 2 bad input.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from soarlab.decide.length_flag import flag as length_flag
from soarlab.prediction.noise import NoiseRecord, log_interval, side
from soarlab.tracking.runs import RunRecord
from soarlab.domain import LEVELS
from soarlab.schema import SoarConfig

EXIT_BETTER, EXIT_SAME, EXIT_WORSE, EXIT_MIXED = 0, 1, 3, 4


@dataclass
class LevelDiff:
    level: str
    mean_a_s: float | None
    mean_b_s: float | None
    difference_s: float | None
    low_s: float | None
    high_s: float | None
    runs: tuple[int, int]
    noise: tuple[str, str]  # where each side's spread came from: reruns | noise record | within-run only
    verdict: str  # faster | slower | within noise | noise unknown | not comparable


def level_difference(a: Sequence[RunRecord], b: Sequence[RunRecord], level: str, confidence: float,
                     negligible_pct: float, record: NoiseRecord | None) -> LevelDiff:
    sa, sb = side(a, level, record), side(b, level, record)
    if sa is None or sb is None:
        return LevelDiff(level, None, None, None, None, None, (len(a), len(b)), ("", ""), "not comparable")
    diff = sb.mean_s - sa.mean_s
    found = (sa.mean_s, sb.mean_s, diff)
    interval = log_interval(sa, sb, confidence)
    if interval is None:
        return LevelDiff(level, *found, None, None, (sa.runs, sb.runs), (sa.source, sb.source), "noise unknown")
    low, high = (sa.mean_s * math.expm1(x) for x in interval)
    verdict = "slower" if low > 0 else "faster" if high < 0 else "within noise"
    if abs(diff) < negligible_pct / 100 * sa.mean_s:
        verdict = "within noise"
    return LevelDiff(level, *found, low, high, (sa.runs, sb.runs), (sa.source, sb.source), verdict)


def compare(a_runs: Sequence[RunRecord], b_runs: Sequence[RunRecord], cfg: SoarConfig, record: NoiseRecord | None) -> dict:
    """The verdict on B against A; the first run of each side is the one whose accuracy counts."""
    score_cfg, confidence = cfg.score, cfg.decide.confidence
    negligible = cfg.decide.compare.negligible_pct
    levels = [level_difference(a_runs, b_runs, level, confidence, negligible, record) for level in LEVELS]
    a, b = a_runs[0], b_runs[0]
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
            "a_runs": [r.run_id for r in a_runs], "b_runs": [r.run_id for r in b_runs],
            "noise_record": record.describe() if record else None, "levels": [asdict(d) for d in levels],
            "accuracy": accuracy, "C_band_a": bands["A"], "C_band_b": bands["B"], "exit_code": code,
            "speculative": {side: speculative_figures(run) for side, run in (("A", a), ("B", b))}}


def speculative_figures(run: RunRecord) -> dict | None:
    """Tokens per speculative verification per level, and the answers it changed; None without speculative decoding."""
    accept = {level: run.metrics.get(f"bench.{level}_spec_accept_length") for level in LEVELS}
    changed = run.metrics.get("lossless.answers_differ")
    if all(v is None for v in accept.values()) and changed is None:
        return None
    return {"accept_length": accept, "answers_changed": changed}


def answer_lengths(run: RunRecord, runs: Sequence[RunRecord], margins) -> dict | None:
    """The run's answer lengths and their flag against its reference run (decide.lengths); None if not measured."""
    p95 = run.metrics.get("accuracy.length_p95")
    if p95 is None:
        return None
    return {"p95": p95, "at_cap": run.metrics.get("accuracy.length_at_cap", 0), "flag": length_flag(run, runs, margins)}
