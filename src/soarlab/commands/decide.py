"""leaderboard, compare, record-submission, gate: choosing what to submit (soarlab.decide; README "Decide
before submitting")."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path

from soarlab.domain import LEVELS
from soarlab.names.mlflow_tags import (COMPARE_TAG, MACHINE_TAG, PRUNED_TAG, SUBMISSION_NOTE_TAG, SUBMITTED_AT_TAG,
                                       SUBMITTED_TAG)


def add_parsers(sub) -> None:
    hydra = dict(nargs="*", help="Hydra overrides, e.g. tracking.uri=http://mlflow:5000 decide.confidence=0.9")
    p = sub.add_parser("leaderboard", help="rank the MLflow runs by score, with a Pareto plot")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("--model", help="only runs of this model (model.name)")
    p.add_argument("--speed-set", help="only runs on this speed set (sha256 or its first characters)")
    p.add_argument("--sweep", help="only runs of this sweep (its parent run id)")
    p.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table")
    p.add_argument("--plot", help="where to write the Pareto PNG (default: decide.leaderboard.plot)")
    p.add_argument("--no-plot", action="store_true", help="no Pareto plot")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=leaderboard_cli)

    p = sub.add_parser("compare", help="per-level duration difference of run B against A, beyond noise (exit 0 better, 1 same, 3 worse, 4 mixed)")
    p.add_argument("a", help="run id, DVC experiment name, best or submitted")
    p.add_argument("b", help="run id, DVC experiment name, best or submitted")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("--rerun", type=int, metavar="N",
                   help="run both configurations N times, interleaved, each from a fresh server start; run means are the samples")
    p.add_argument("--json", action="store_true")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=compare_cli)

    p = sub.add_parser("record-submission", help="store the platform's official figures on a run")
    p.add_argument("target", metavar="RUN", help="run id, DVC experiment name or best")
    for level in LEVELS:
        p.add_argument(f"--{level}", type=float, help=f"official {level} Benchmark duration (s)")
    p.add_argument("--accuracy", type=float, help="official raw accuracy (ori, percent)")
    p.add_argument("--final", type=float, help="official final score, as shown")
    p.add_argument("--note")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=record_submission_cli)

    p = sub.add_parser("gate", help="exit 0 only if RUN's predicted official final beats the reference beyond noise")
    p.add_argument("target", metavar="RUN", help="run id, DVC experiment name or best")
    p.add_argument("--against", help="submitted (default: decide.gate.against), best, or a run")
    p.add_argument("--min-gain", type=float, help="points of final to win beyond noise (default: decide.gate.min_gain)")
    p.add_argument("--allow-long-answers", action="store_true",
                   help="pass a run whose answers are longer than the unquantized run's (decide.lengths)")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment)")
    p.add_argument("overrides", **hydra)
    p.set_defaults(run=gate_cli)


def leaderboard_cli(args) -> int:
    """`soarlab leaderboard [--format F] [--plot PNG | --no-plot]`: the recorded runs ranked by score, with a
    Pareto plot (soarlab.decide.leaderboard)."""
    from soarlab.decide.leaderboard import log_plot, pareto_plot, render, rows
    from soarlab.decide.run_refs import decide_config
    from soarlab.paths import project_root
    from soarlab.prediction.calibration import fit
    from soarlab.tracking.runs import load_runs

    cfg = decide_config(args)
    client, _, runs = load_runs(cfg, model=args.model, speed_set=args.speed_set, sweep=args.sweep)
    calibration = fit(runs, cfg)
    for warning in calibration.warnings:
        print(f"soarlab: warning: {warning}", file=sys.stderr)
    table = rows(runs, calibration, cfg)
    if table or args.format == "json":  # an empty JSON list is still JSON
        print(render(table, args.format))
    if not table:
        print(f"no run with bench figures in experiment {cfg.tracking.experiment!r}"
              f"{'' if runs.pruned else ': run the pipeline first (dvc repro)'}", file=sys.stderr)
    if runs.pruned:
        print(f"{len(runs.pruned)} pruned sweep trial(s) not ranked: stopped early, no full bench "
              f"(the run's {PRUNED_TAG} tag says why)", file=sys.stderr)
    for row in table:
        if row["long_answers"]:
            print(f"soarlab: warning: #{row['rank']} {row['run_id'][:8]}: {row['long_answers']}", file=sys.stderr)
    for record in calibration.noise.values():
        print(record.describe(), file=sys.stderr)
    if not calibration.noise and runs:
        print("no noise record: no two runs with the same inputs on one machine, so a duration's run-to-run noise "
              "is unknown; measure it with `soarlab compare A B --rerun 3`", file=sys.stderr)
    if not args.no_plot and table:
        target = Path(args.plot or project_root() / cfg.decide.leaderboard.plot)
        if pareto_plot(table, runs, cfg, calibration.noise, target):
            run_id = log_plot(client, cfg.tracking.experiment, args.sweep, target)
            print(f"Pareto plot: {target} (MLflow run {run_id}, artifacts/leaderboard)", file=sys.stderr)
    return 0


def compare_cli(args) -> int:
    """`soarlab compare A B [--rerun N] [--json]`: B against A per level, beyond noise; the exit code says
    which way (soarlab.decide.compare)."""
    from soarlab.decide.compare import (EXIT_BETTER, EXIT_MIXED, EXIT_SAME, EXIT_WORSE, answer_lengths,
                                        compare)
    from soarlab.decide.run_refs import decide_config, resolve
    from soarlab.errors import SoarError
    from soarlab.prediction.calibration import by_predicted_final, fit
    from soarlab.prediction.noise import noise_record
    from soarlab.tracking.runs import load_runs

    cfg = decide_config(args)
    _, _, runs = load_runs(cfg)
    calibration = fit(runs, cfg)
    rank = by_predicted_final(calibration, cfg.score)
    a, b = resolve(args.a, runs, rank), resolve(args.b, runs, rank)
    if a.run_id == b.run_id:
        print(f"soarlab: note: {args.a} and {args.b} are the same run {a.run_id[:8]}", file=sys.stderr)
    incidental = cfg.decide.incidental_params
    if args.rerun is not None:
        if args.rerun < 2:
            raise SoarError(f"--rerun {args.rerun} gives no spread between runs", "give --rerun 2 or more (3 is a good start)")
        from soarlab.decide.rerun import rerun_pair

        a_runs, b_runs = rerun_pair(cfg, a, b, args.rerun)
    else:
        a_runs, b_runs = [a], [b]
    record = noise_record(runs, a.tags.get(MACHINE_TAG, ""), incidental)
    result = compare(a_runs, b_runs, cfg, record)
    result["lengths"] = {side: answer_lengths(run, runs, cfg.decide.lengths) for side, run in (("A", a), ("B", b))}
    if args.rerun is None and record is None:
        print("soarlab: warning: no noise record for this machine (no two recorded runs with the same inputs): the "
              "interval holds only the spread of each run's repeats, and runs drift more than that. Measure it with "
              f"`soarlab compare {args.a} {args.b} --rerun 3`", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
        return result["exit_code"]
    print(f"A = {a.name} ({a.run_id[:8]})\nB = {b.name} ({b.run_id[:8]})")
    if args.rerun is not None:
        print(f"reruns: {args.rerun} per side, interleaved (tag {COMPARE_TAG}={a_runs[0].tags.get(COMPARE_TAG)})")
    elif record is not None:
        print(record.describe())
    print(f"duration B - A per level, {result['confidence']:.0%} Welch t interval of the run means:")
    for d in result["levels"]:
        print(_describe(d))
    print(f"accuracy: {result['accuracy']}")
    for side, lengths in result["lengths"].items():
        if lengths:
            print(f"answer lengths ({side}): p95 {lengths['p95']:.0f} tokens, {lengths['at_cap']:.0f} at the cap"
                  + (f"; FLAGGED: {lengths['flag']}" if lengths["flag"] else ""))
    for side, spec in result["speculative"].items():
        if spec:
            accept = ", ".join(f"{lvl} {v:.2f}" for lvl, v in spec["accept_length"].items() if v is not None)
            changed = "" if spec["answers_changed"] is None else f"; answers changed against spec=none: {spec['answers_changed']:.0f}"
            print(f"speculative decoding ({side}): tokens per verification {accept or '-'}{changed}")
    verdict = {EXIT_BETTER: "B is better", EXIT_SAME: "no difference beyond noise", EXIT_WORSE: "B is worse",
               EXIT_MIXED: "mixed: B is faster at one level and slower at another"}[result["exit_code"]]
    print(f"verdict: {verdict} (exit {result['exit_code']})")
    return result["exit_code"]


def _describe(d: dict) -> str:
    if d["difference_s"] is None:
        return f"{d['level']:>5}: not comparable (a level without a valid duration)"
    text = f"{d['level']:>5}: A {d['mean_a_s']:.3f} s, B {d['mean_b_s']:.3f} s, B-A {d['difference_s']:+.3f} s"
    if d["low_s"] is None:
        return text + " -> noise unknown (one repeat, no reruns, no noise record; rerun with --rerun 3)"
    noise = " and ".join(dict.fromkeys(d["noise"]))
    return text + f" [{d['low_s']:+.3f}, {d['high_s']:+.3f}] -> {d['verdict']} (noise: {noise}; runs {d['runs'][0]}/{d['runs'][1]})"


def record_submission_cli(args) -> int:
    """`soarlab record-submission RUN --S1 .. --S8 .. --Smax .. --accuracy X`: the platform's official figures
    stored on RUN, and the calibration refitted with them (soarlab.decide.submission)."""
    from mlflow.entities import Metric, RunTag

    from soarlab.bench.metrics import level_key
    from soarlab.decide.run_refs import decide_config, resolve
    from soarlab.decide.submission import check_figures
    from soarlab.errors import SoarError
    from soarlab.prediction.calibration import by_predicted_final, fit, log_predictions
    from soarlab.tracking.runs import OFFICIAL, load_runs

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


def gate_cli(args) -> int:
    """`soarlab gate RUN [--against REF] [--min-gain X] [--allow-long-answers]`: exit 0 only when RUN is worth
    a submission (soarlab.decide.gate), and why."""
    from soarlab.decide.gate import EXIT_FAIL, EXIT_PASS, decide, official_reference
    from soarlab.decide.length_flag import flag as length_flag
    from soarlab.decide.run_refs import decide_config, resolve
    from soarlab.errors import SoarError
    from soarlab.prediction.calibration import by_predicted_final, fit, predict
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
