"""SOAR's pruning rules as an Optuna pruner, so a sweep can name it, or any of Optuna's own, in config."""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from soarlab.pruning import ACCURACY, S1


def best_finished(study: optuna.Study) -> FrozenTrial | None:
    """The finished trial with the highest objective above 0 (one that passed the accuracy gate)."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if (t.value or 0) > 0]
    return max(done, key=lambda t: t.value, default=None)


class SoarPruner(BasePruner):
    """Prune a trial that cannot win:
    - step ACCURACY: C of the whole correctness set is 0, so its final score is 0 whatever its speed;
    - step S1: S1 over its first requests is more than `slower_pct` % slower than the best finished
      trial's at the same point (no finished trial yet: never)."""

    def __init__(self, slower_pct: float = 30.0):
        self.slower_pct = float(slower_pct)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return self.reason(study, trial) is not None

    def reason(self, study: optuna.Study, trial: FrozenTrial) -> str | None:
        step = trial.last_step
        value = trial.intermediate_values.get(step) if step is not None else None
        if step == ACCURACY and value is not None and value <= 0:
            return "C is 0 on the correctness set: it cannot pass the accuracy gate (final 0 at any speed)"
        if step == S1 and value:
            best = best_finished(study)
            ref = best.intermediate_values.get(S1) if best is not None else None
            if ref and ref / value - 1 > self.slower_pct / 100:
                return (f"S1 over its first requests is {100 * (ref / value - 1):.0f}% slower than the best finished "
                        f"trial's (#{best.number}), more than {self.slower_pct:g}%")
        return None
