"""The SOAR 2026 score (RULES.md 1). Every constant comes from the `score` config group.

    S_level    = speed_scale * duration_best / duration_yours
    normalized = min(ori / baseline * 100, accuracy_cap)
    C          = c_table step on normalized (first `above` strictly below it), else c_floor
    final      = (sum of weight_level * S_level) * C
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from soarlab.domain import LEVELS
from soarlab.errors import SoarError
from soarlab.schema import CBand, ScoreGroup

_LEVELS_TEXT = ", ".join(LEVELS)
_LEVELS_FORMAT = ",".join(f"{level}=SECONDS" for level in LEVELS)


def normalized_accuracy(ori: float, baseline: float, cap: float) -> float:
    return min(ori / baseline * 100.0, cap)


def coefficient(norm: float, c_table: Sequence[CBand], c_floor: float) -> float:
    for band in sorted(c_table, key=lambda b: b.above, reverse=True):
        if norm > band.above:
            return band.C
    return c_floor


def speed_scores(durations: Mapping[str, float], best: Mapping[str, float], scale: float) -> dict[str, float]:
    for level in LEVELS:
        for name, table in (("duration", durations), ("best duration", best)):
            if not table.get(level) or not math.isfinite(table[level]) or table[level] <= 0:
                raise SoarError(f"{name} of {level} is missing or not a positive number ({table.get(level)})",
                                f"give a positive number of seconds for {_LEVELS_TEXT}")
    return {level: scale * best[level] / durations[level] for level in LEVELS}


def final_score(durations: Mapping[str, float], best: Mapping[str, float], ori: float, baseline: float, score_cfg: ScoreGroup) -> dict:
    """Everything RULES.md 1 defines, rounded as the platform shows it."""
    if not math.isfinite(ori) or not 0 <= ori <= 100:
        raise SoarError(f"raw accuracy {ori} is not a percentage", "give the raw accuracy as a number from 0 to 100")
    speeds = speed_scores(durations, best, score_cfg.speed_scale)
    performance = sum(score_cfg.weights[level] * speeds[level] for level in LEVELS)
    norm = normalized_accuracy(ori, baseline, score_cfg.accuracy_cap)
    c = coefficient(norm, score_cfg.c_table, score_cfg.c_floor)
    digits = score_cfg.decimals
    return {
        **{level: round(speeds[level], digits) for level in LEVELS},
        "performance": round(performance, digits),
        "ori_accuracy": round(ori, digits),
        "normalized_accuracy": round(norm, digits),
        "C": c,
        "final": round(performance * c, digits),
    }


def parse_levels(text: str) -> dict[str, float]:
    """'S1=1.5,S8=2,Smax=3' -> {'S1': 1.5, ...}"""
    try:
        pairs = dict(item.split("=", 1) for item in text.split(",") if item.strip())
        values = {key.strip(): float(value) for key, value in pairs.items()}
    except ValueError:
        raise SoarError(f"cannot read levels from {text!r}", f"write them as {_LEVELS_FORMAT}") from None
    unknown = set(values) - set(LEVELS)
    if unknown or len(values) != len(LEVELS):
        raise SoarError(f"levels in {text!r} must be exactly {_LEVELS_TEXT}", f"write them as {_LEVELS_FORMAT}")
    return values
