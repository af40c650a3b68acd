"""Pruning: sweep trials that cannot win are stopped early (soarlab.pruning, soarlab.sweep.pruning).

The pruner's rules run on a real in-memory Optuna study. The sweeps are real (`soarlab sweep`: Hydra,
DVC experiments, MLflow, lm-eval): on the tiny default, a quant preset whose accuracy cannot pass the
gate is pruned before bench; served by loopback servers (soarlab.bench.loopback, `engine=external`),
one with a per-token delay is pruned during S1. Nothing is mocked.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import optuna
import pytest

from soarlab.bench.loopback import LoopbackServer
from soarlab.pruning import ACCURACY, S1
from soarlab.pruning.pruner import SoarPruner

from support import QUICK_BENCH, children, sweep

# The shipped tiny model's presets on either side of the accuracy gate (README's table, the same bytes on every
# CPU): `none` scores C = 1, fully 4-bit `gptq_w4` C = 0.
PASSES, CANNOT_PASS = "none", "gptq_w4"


def study_with_best(s1_rate: float, objective: float = 5.0) -> optuna.Study:
    study = optuna.create_study(direction="maximize", pruner=SoarPruner(slower_pct=30))
    trial = study.ask()
    trial.report(1.0, ACCURACY)
    trial.report(s1_rate, S1)
    study.tell(trial, objective)
    return study


def test_the_accuracy_rule_prunes_only_a_trial_that_cannot_reach_c_above_0():
    study = study_with_best(10.0)
    hopeless, hopeful = study.ask(), study.ask()
    hopeless.report(0.0, ACCURACY)
    hopeful.report(0.6, ACCURACY)
    assert hopeless.should_prune() and not hopeful.should_prune()


def test_the_s1_rule_compares_with_the_best_finished_trials_s1_at_the_same_point():
    study = study_with_best(10.0)
    worse = study_with_best(20.0, objective=1.0).trials[0]  # a finished but worse trial is not the reference
    study.add_trial(worse)
    slow, close = study.ask(), study.ask()
    for trial, rate in ((slow, 10.0 / 1.31), (close, 10.0 / 1.29)):
        trial.report(1.0, ACCURACY)
        trial.report(rate, S1)
    assert slow.should_prune() and not close.should_prune()
    frozen = study.trials[slow.number]
    assert "31% slower than the best finished trial's (#0)" in SoarPruner(30).reason(study, frozen)


def test_without_a_finished_trial_s1_prunes_nothing():
    study = optuna.create_study(direction="maximize", pruner=SoarPruner())
    trial = study.ask()
    trial.report(1.0, ACCURACY)
    trial.report(0.001, S1)
    assert not trial.should_prune()


def test_a_pruned_trial_ranks_below_every_scored_trial_and_returns_no_objective():
    from soarlab.sweep.record import TrialResult, summary_table

    gated = TrialResult(["a"], final=0.0, C=0.0)
    pruned = TrialResult(["b"], pruned="C is 0")
    failed = TrialResult(["c"], failure="server did not start")
    assert sorted([failed, pruned, gated], key=TrialResult.rank_key) == [gated, pruned, failed]
    assert pruned.objective is None and "PRUNED (C is 0)" in pruned.line()
    assert "PRUNED" in summary_table([pruned, failed]).splitlines()[1]


def test_leaderboard_and_compare_say_a_pruned_trial_has_no_full_bench(tmp_path):
    """A real MLflow store holding one pruned trial, as track logs it (score.pruned = 1, no bench levels):
    the leaderboard says it left it out instead of printing nothing, and compare names why it cannot
    compare it."""
    import os

    from support import ROOT, soarlab_in

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    run = client.create_run(client.create_experiment("soarlab"), run_name="trial",
                            tags={"soarlab.pruned": "C is 0 on the correctness set", "dvc.experiment": "sweep-1a2b3c"})
    client.log_metric(run.info.run_id, "score.pruned", 1.0)
    client.set_terminated(run.info.run_id)
    here = (ROOT, dict(os.environ))

    board = soarlab_in(here, ["leaderboard", "--no-plot", f"tracking.uri={uri}"])
    assert board.stdout.strip() == "", board.stderr
    assert "no run with bench figures in experiment 'soarlab'" in board.stderr
    assert "1 pruned sweep trial(s) not ranked" in board.stderr
    compare = soarlab_in(here, ["compare", "sweep-1a2b3c", run.info.run_id[:8], f"tracking.uri={uri}"], ok=(2,))
    assert "is a sweep trial that was pruned (C is 0 on the correctness set)" in compare.stderr, compare.stderr


def trial_runs(dest: Path, name: str) -> dict[str, mlflow.entities.Run]:
    """The sweep's child runs by their overrides (as one string)."""
    _, runs = children(dest, name)
    return {" ".join(json.loads(r.data.tags["soarlab.trial"])): r for r in runs}


@pytest.mark.slow
@pytest.mark.e2e
def test_a_preset_that_cannot_pass_the_gate_is_pruned_before_bench(repo_copy_without_outputs):
    dest, env = repo_copy_without_outputs
    # the passing preset first: the time a pruned trial saved is measured against a finished one
    space = ["bench.dataset.num_requests=4", *QUICK_BENCH, f"quant={PASSES},{CANNOT_PASS}"]
    out = sweep(repo_copy_without_outputs, "--name", "gate-pruned", "sweep.prune=true", *space)
    # The same sweep without pruning, after it: DVC's run cache must not hand it the pruned evaluate.
    plain_out = sweep(repo_copy_without_outputs, "--name", "gate-plain", *space)
    pruned, plain = trial_runs(dest, "gate-pruned"), trial_runs(dest, "gate-plain")
    assert set(pruned) == set(plain) and len(plain) == 2
    cannot = {key for key, run in plain.items() if run.data.metrics["score.C"] == 0}
    assert cannot and cannot != set(plain), f"the tiny default should have one preset at C = 0: {plain_out[-3000:]}"
    for key, run in pruned.items():
        if key in cannot:
            assert "cannot pass the accuracy gate" in run.data.tags["soarlab.pruned"], out[-3000:]
            assert run.data.tags["soarlab.pruned_step"].startswith(f"{ACCURACY} ")
            assert run.data.metrics["pruning.C"] == 0 and "pruning.ori_high" in run.data.metrics
            assert run.data.metrics["pruning.saved_s"] >= 0 and run.data.metrics["score.pruned"] == 1
            assert "bench.S1_duration_s" not in run.data.metrics  # no level ran
        else:
            assert "soarlab.pruned" not in run.data.tags and run.data.metrics["score.C"] > 0
    assert "PRUNED" in out
    logs = [p.read_text(errors="replace") for p in (dest / "sweeps" / "gate-pruned").glob("*/trial.log")]
    stopped = [text for text in logs if "evaluate: pruned at step 0" in text]
    assert len(stopped) == len(cannot) and all("S1 run 1/" not in text for text in stopped)  # no level started
    # The plain sweep ran the preset's evaluate to the end (a score, not a restored pruned one).
    assert all("soarlab.pruned" not in run.data.tags and "score.final" in run.data.metrics for run in plain.values())
    # The sweep's best is unchanged by pruning.
    (pruned_parent, _), (plain_parent, _) = children(dest, "gate-pruned"), children(dest, "gate-plain")
    assert pruned_parent.data.tags["soarlab.best_overrides"] == plain_parent.data.tags["soarlab.best_overrides"]
    assert pruned_parent.data.metrics["trials.pruned"] == len(cannot)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_slow_serving_setting_is_pruned_during_s1(repo_copy_without_outputs):
    dest, _ = repo_copy_without_outputs
    served = ["quant=none", "engine=external", "bench.pause_after_flush_s=0", "eval.retries=0", "eval.limit=4",
              "score.c_floor=1.0", "bench.dataset.num_requests=8"]  # c_floor: the loopback's answers keep C at 1
    with LoopbackServer() as fast, LoopbackServer(token_delay_s=0.02) as slow:
        out = sweep(repo_copy_without_outputs, "--name", "s1-pruned", "sweep.prune=true", *served,
                    f"engine.url='{fast.base_url}','{slow.base_url}'")  # the fast one first: the best finished trial
        slow_requests = slow.stats.requests
    runs = trial_runs(dest, "s1-pruned")
    by_url = {next(o for o in key.split() if o.startswith("engine.url")): run for key, run in runs.items()}
    slow_run = next(run for key, run in by_url.items() if slow.base_url in key)
    fast_run = next(run for key, run in by_url.items() if fast.base_url in key)
    assert "soarlab.pruned" not in fast_run.data.tags and fast_run.data.metrics["score.final"] > 0, out[-3000:]
    assert "slower than the best finished trial's" in slow_run.data.tags["soarlab.pruned"], out[-3000:]
    assert slow_run.data.tags["soarlab.pruned_step"].startswith(f"{S1} ")
    assert slow_run.data.metrics["pruning.requests"] == 2 and slow_run.data.metrics["pruning.of"] == 8
    # Stopped during S1's first run: far fewer requests than S1's runs, S8 and Smax would have sent.
    assert slow_requests < 4 + 8 * 3, slow_requests


@pytest.mark.slow
@pytest.mark.e2e
def test_the_optuna_sweeper_takes_any_optuna_pruner_from_config(repo_copy_without_outputs):
    """`hydra.sweeper.pruner`: one of Optuna's own pruners, named in config, prunes the trial and the
    sweeper's study records it as PRUNED. ThresholdPruner(lower=0.5) prunes a trial whose first report
    (C at the accuracy step) is below 0.5; CANNOT_PASS scores C = 0.
    Its bench set (5 requests) is one no other test of this module ran: DVC would restore that full
    evaluate from its run cache, which reports nothing to prune (docs/ARCHITECTURE.md, "Pruning")."""
    import sqlite3

    dest, _ = repo_copy_without_outputs
    out = sweep(repo_copy_without_outputs, "--name", "optuna-pruned", "bench.dataset.num_requests=5", "hydra/sweeper=optuna",
                "hydra.sweeper.n_trials=1", f"quant=choice({CANNOT_PASS})",
                "hydra.sweeper.pruner={_target_: optuna.pruners.ThresholdPruner, lower: 0.5}")
    (run,) = trial_runs(dest, "optuna-pruned").values()
    assert "ThresholdPruner pruned it at step 0" in run.data.tags["soarlab.pruned"], out[-3000:]
    assert "bench.S1_duration_s" not in run.data.metrics and "PRUNED" in out
    db = sqlite3.connect(dest / "sweeps" / "optuna-pruned" / "optuna.db")
    assert [s for (s,) in db.execute("select state from trials")] == ["PRUNED"]
