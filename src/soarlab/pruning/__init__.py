"""Early stopping of sweep trials that cannot win (pruning), across the two processes of a trial.

The evaluate stage (checkpoints.Checkpoints) appends each intermediate result to REPORTS in the
trial's logs folder and, where the next part is costly, waits a bounded time for the decision the
trial process writes (decision_path). The trial process (soarlab.sweep.pruning) owns an Optuna trial:
it calls `trial.report(value, step)` and `trial.should_prune()` with the configured pruner
(pruner.SoarPruner by default) and writes the decision. Files, not Optuna's private APIs, cross the
process boundary, so the stage needs no Optuna and runs alone exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPORTS = "intermediate.jsonl"  # under the trial's logs folder (soarlab.names.environment.TRIAL_LOGS_ENV)
# Steps, in the order evaluate reaches them; every value is "higher is better", as the objective is,
# so Optuna's own pruners (median, percentile, ...) read them the right way round.
ACCURACY = 0  # C on the whole correctness set: the trial's final C (0: its final score is 0)
S1 = 1  # S1 requests per second over the first part of its first run
END = -1  # evaluate finished (not a step Optuna sees): its elapsed time, for the time saved
SOAR_PRUNER = "soarlab.pruning.pruner.SoarPruner"  # the default pruner, as a `_target_`


def decision_path(folder: Path, step: int) -> Path:
    return folder / f"decision-{step}.json"


@dataclass
class PrunedTrial:
    """What a pruned sweep trial returns to its sweeper (the Optuna sweeper tells its study PRUNED)."""

    reason: str


class Pruned(Exception):
    """Raised inside evaluate when the trial process decided to stop it."""

    def __init__(self, step: int, what: str, reason: str, figures: dict):
        super().__init__(reason)
        self.step, self.what, self.reason, self.figures = step, what, reason, figures

    def record(self) -> dict:
        return {"pruned": True, "step": self.step, "what": self.what, "reason": self.reason, "figures": self.figures}
