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

import sys

from soarlab.prediction.calibration import Calibration, Prediction, by_predicted_final, fit, predict
from soarlab.decide.length_flag import flag as length_flag
from soarlab.schema import ScoreGroup
from soarlab.tracking.runs import RunRecord
from soarlab.errors import SoarError
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import MACHINE_TAG
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


def gate_cli(args) -> int:
    from soarlab.decide.run_refs import decide_config, resolve
    from soarlab.tracking.runs import load_runs

    cfg = decide_config(args)
    against = args.against or cfg.decide.gate.against
    min_gain = cfg.decide.gate.min_gain if args.min_gain is None else args.min_gain
    _, _, runs = load_runs(cfg)
    calibration = fit(runs, cfg)
    for warning in calibration.warnings:
        print(f"soarlab: warning: {warning}", file=sys.stderr)
    rank = by_predicted_final(calibration, cfg.score)
    run, ref = resolve(args.target, runs, rank), resolve(against, runs, rank)
    if run.run_id == ref.run_id:
        raise SoarError(f"the run and the reference ({against}) are the same run {run.run_id[:8]}", "gate another run, or pick another --against")
    prediction = predict(calibration, run, cfg.score)
    if prediction is None:
        raise SoarError(f"run {run.run_id[:8]} has no final to predict (an invalid level or no accuracy)", "gate a run whose bench and accuracy stages succeeded")
    if ref.submitted:
        final, c = official_reference(ref, calibration, cfg.score)
        reference, what = (final, final, final), f"the official figures of {ref.name} ({ref.run_id[:8]})"
    else:
        ref_prediction = predict(calibration, ref, cfg.score)
        if ref_prediction is None:
            raise SoarError(f"reference run {ref.run_id[:8]} has no final", "pick a reference whose bench and accuracy stages succeeded")
        reference, c, what = ref_prediction.final, ref_prediction.C[1], f"the prediction of {ref.name} ({ref.run_id[:8]})"
    passed, reasons = decide(prediction, reference, c, min_gain)
    long_answers = length_flag(run, runs, cfg.decide.lengths)
    if long_answers:
        allowed = args.allow_long_answers
        passed = passed and allowed
        reasons.append(f"{long_answers}: the official pass takes longer (RULES.md 4); "
                       + ("allowed by --allow-long-answers" if allowed else "refused (--allow-long-answers to accept)"))
    record = calibration.noise.get(run.tags.get(MACHINE_TAG, ""))
    reasons.append(record.describe() + ": the run's duration noise" if record else
                   "no noise record for this machine: duration intervals hold only each run's repeats; "
                   f"measure run-to-run noise with `soarlab compare {args.target} {against} --rerun 3`")
    basis = f"calibrated on {calibration.submissions} submission(s)" if calibration.submissions else "no submission recorded: local score"
    print(f"gate {run.name} ({run.run_id[:8]}) against {what}; {basis}, {calibration.confidence:.0%} intervals")
    for reason in reasons:
        print(f"  - {reason}")
    print("PASS: worth a submission" if passed else "FAIL: not worth a submission yet")
    return EXIT_PASS if passed else EXIT_FAIL
