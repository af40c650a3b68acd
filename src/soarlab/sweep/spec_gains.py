"""A speculative-decoding sweep's trade per level: each trial against the sweep's spec=none trial.

Speculative decoding pays most at S1 and can cost at Smax, where the batch already fills the GPU, so
the table shows each level's duration change and the change of the speed part of the final score
(levels weighted as `score.weights` weighs them; the references and C held fixed), against the trial
that differs only in running spec=none.
"""

from __future__ import annotations

from typing import Sequence

from soarlab.domain import LEVELS


def _is_spec(override: str) -> bool:
    key = override.lstrip("+").split("=", 1)[0]
    return key == "spec" or key.startswith("spec.")


def _rest(overrides: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(o for o in overrides if not _is_spec(o)))


def _is_baseline(overrides: Sequence[str]) -> bool:
    spec = [o for o in overrides if _is_spec(o)]
    return not spec or spec == ["spec=none"]


def speed_change(durations: dict, baseline: dict, weights: dict[str, float]) -> float | None:
    """Percent change of the weighted speed score (sum of weight / duration) against the baseline's."""
    if any(not durations.get(lvl) or not baseline.get(lvl) for lvl in weights):
        return None
    mine = sum(w / durations[lvl] for lvl, w in weights.items())
    base = sum(w / baseline[lvl] for lvl, w in weights.items())
    return 100 * (mine / base - 1)


def spec_gains_table(results: Sequence, weights: dict[str, float]) -> str | None:
    """Rows of `results` (sweep TrialResults) that run speculative decoding, against their spec=none trial;
    None when the sweep has no such pair."""
    baselines = {_rest(r.overrides): r for r in results if _is_baseline(r.overrides) and r.final is not None}
    rows = []
    for r in results:
        base = baselines.get(_rest(r.overrides))
        if _is_baseline(r.overrides) or base is None or r.final is None:
            continue
        cells = []
        for lvl in LEVELS:
            d, b = r.durations.get(lvl), base.durations.get(lvl)
            cells.append(f"{100 * (b - d) / b:+7.1f}%" if d and b else f"{'':>8}")
        weighted = speed_change(r.durations, base.durations, weights)
        rows.append("  ".join(cells) + f"  {'' if weighted is None else f'{weighted:+7.1f}%':>8}  "
                    + " ".join(o for o in r.overrides if _is_spec(o)))
    if not rows:
        return None
    head = "  ".join(f"{lvl:>8}" for lvl in LEVELS) + f"  {'weighted':>8}  spec"
    return "\n".join([head, *rows])
