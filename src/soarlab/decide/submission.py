"""`soarlab record-submission RUN --S1 .. --S8 .. --Smax .. --accuracy .. [--final X] [--note ..]`.

Stores the platform's figures on the run as `official.*` metrics and marks it submitted; the
calibration then uses it, and every run's `predicted.*` metrics are refreshed.
"""

from __future__ import annotations

import math

from soarlab.errors import SoarError
from soarlab.domain import LEVELS
from soarlab.schema import ScoreGroup

_FIX = "copy the platform's figures: --S1 596 --S8 1066 --Smax 2746 (Benchmark duration, seconds) --accuracy 81.2 (raw ori, percent)"


def check_figures(durations: dict[str, float | None], accuracy: float | None, final: float | None, score_cfg: ScoreGroup) -> None:
    """SoarError for a figure that is missing or makes no sense."""
    missing = [f"--{L}" for L in LEVELS if durations.get(L) is None] + (["--accuracy"] if accuracy is None else [])
    if missing:
        raise SoarError(f"missing {', '.join(missing)}", _FIX)
    for level, value in durations.items():
        if not math.isfinite(value) or value <= 0:
            raise SoarError(f"--{level} {value} is not a duration: it must be a positive number of seconds", _FIX)
    if not math.isfinite(accuracy) or not 0 <= accuracy <= 100:
        raise SoarError(f"--accuracy {accuracy} is not a raw accuracy in percent (0-100)", _FIX)
    top = score_cfg.speed_scale * sum(score_cfg.weights[L] for L in LEVELS)
    if final is not None and (not math.isfinite(final) or not 0 <= final <= top):
        raise SoarError(f"--final {final} is outside 0..{top:g}, the range of a final score (RULES.md 1)", "give the final the platform showed, or leave --final out")
