"""`soarlab gate RUN [--against submitted|best|RUN] [--min-gain X]`: spend a submission or not.

Passes (exit 0) only when the low end of RUN's predicted official final beats the reference's
high end by more than `min_gain` (each interval holds the run-to-run noise of the machine's noise
record, soarlab.prediction.noise), and RUN's C is settled (its ori interval stays in one band) in
the same or a better band than the reference's, and its answers are not flagged as longer than the
unquantized run's (soarlab.decide.length_flag) unless --allow-long-answers. The reference of `submitted` is the platform's own
figures (its final as recorded, else scored from its recorded durations and accuracy); of any
other run, its prediction. Exit 1: it does not pass; 2: bad input. It always says why.
"""

from __future__ import annotations


from soarlab.prediction.calibration import Calibration, Prediction
from soarlab.schema import ScoreGroup
from soarlab.tracking.runs import RunRecord
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.final_score import final_score

EXIT_PASS, EXIT_FAIL = 0, 1


def official_reference(run: RunRecord, calibration: Calibration, score_cfg: ScoreGroup) -> tuple[float, float]:
    """(final, C) the platform gave a submitted run."""
    durations = {L: run.official(level_key(L, "duration_s")) for L in LEVELS}
    best = calibration.best[run.group]
    scored = final_score(durations, {L: min(best[L], durations[L]) for L in LEVELS}, run.official("ori_accuracy"), run.baseline, score_cfg)
    final = run.official("final")
    return (final if final is not None else scored["final"]), scored["C"]


def decide(run: Prediction, reference: tuple[float, float, float], reference_c: float, min_gain: float) -> tuple[bool, list[str]]:
    """(pass?, reasons) for a run's prediction against a reference final (point, low, high) and its C."""
    reasons = []
    margin = run.final[1] - reference[2]
    beats = margin > min_gain
    reasons.append(
        f"predicted final {run.final[0]:.2f} [{run.final[1]:.2f}, {run.final[2]:.2f}] against the reference "
        f"{reference[0]:.2f} [{reference[1]:.2f}, {reference[2]:.2f}]: the low end is {margin:+.2f} from the reference's "
        f"high end, {'more' if beats else 'not more'} than the minimum gain {min_gain:g}"
    )
    settled = run.c_settled
    band_ok = run.C[1] >= reference_c
    if not settled:
        reasons.append(f"C is not settled: the predicted ori interval [{run.ori[1]:.2f}, {run.ori[2]:.2f}] spans C {run.C[1]} to {run.C[2]}")
    reasons.append(f"C {run.C[1]} at the low end against the reference's {reference_c}: {'same or better band' if band_ok else 'a worse band'}")
    return beats and settled and band_ok, reasons
