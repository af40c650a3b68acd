"""`soarlab record-submission RUN --S1 .. --S8 .. --Smax .. --accuracy .. [--final X] [--note ..]`.

Stores the platform's figures on the run as `official.*` metrics and marks it submitted; the
calibration then uses it, and every run's `predicted.*` metrics are refreshed.
"""

from __future__ import annotations

import datetime as dt
import math
import sys
import time

from soarlab.tracking.runs import OFFICIAL
from soarlab.errors import SoarError
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import SUBMISSION_NOTE_TAG, SUBMITTED_AT_TAG, SUBMITTED_TAG
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


def record_submission_cli(args) -> int:
    from mlflow.entities import Metric, RunTag

    from soarlab.decide.run_refs import decide_config, resolve
    from soarlab.prediction.calibration import by_predicted_final, fit, log_predictions
    from soarlab.tracking.runs import load_runs

    cfg = decide_config(args)
    durations = {L: getattr(args, L) for L in LEVELS}
    check_figures(durations, args.accuracy, args.final, cfg.score)
    client, _, runs = load_runs(cfg)
    run = resolve(args.target, runs, by_predicted_final(fit(runs, cfg), cfg.score))
    if not run.valid or run.ori is None:
        raise SoarError(f"run {run.run_id} has no valid local durations and accuracy to calibrate against", "record the submission on a run whose bench and accuracy stages succeeded")
    if run.submitted:
        print(f"soarlab: note: run {run.run_id[:8]} was already recorded as submitted; its official figures are replaced", file=sys.stderr)
    now = int(time.time() * 1000)
    figures = {**{level_key(L, "duration_s"): durations[L] for L in LEVELS}, "ori_accuracy": args.accuracy}
    if args.final is not None:
        figures["final"] = args.final
    tags = {SUBMITTED_TAG: "true", SUBMITTED_AT_TAG: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if args.note:
        tags[SUBMISSION_NOTE_TAG] = args.note
    client.log_batch(run.run_id, metrics=[Metric(OFFICIAL + k, float(v), now, 0) for k, v in figures.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
    print(f"recorded submission on {run.name} ({run.run_id}): " + ", ".join(f"{k} {v:g}" for k, v in figures.items()))
    _, _, runs = load_runs(cfg)
    calibration = fit(runs, cfg)
    ratios = ", ".join(f"{L} x{fit_.ratio:.3g} [{fit_.interval[0]:.3g}, {fit_.interval[1]:.3g}]" for L, fit_ in calibration.levels.items())
    print(f"calibration from {calibration.submissions} submission(s): official/local duration {ratios}; "
          f"accuracy offset {calibration.offset:+.2f} +- {calibration.offset_half:.2f}")
    for warning in calibration.warnings:
        print(f"soarlab: warning: {warning}", file=sys.stderr)
    log_predictions(cfg)
    return 0
