"""The Optuna sweeper's resume: a trial an interrupted sweep left RUNNING is failed and asked again,
through Optuna's public API on a real sqlite study."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from hydra_plugins.soarlab_optuna_sweeper.optuna_sweeper import OptunaSweeper


def test_an_interrupted_trial_is_failed_and_enqueued_again(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = {"quant": CategoricalDistribution(["gptq_w4", "gptq_w8"])}
    first = optuna.create_study(study_name="s", storage=storage)
    left_running = first.ask(space)  # the sweep was killed before it told Optuna the result

    study = optuna.load_study(study_name="s", storage=storage)  # the next `soarlab sweep` of the same name
    OptunaSweeper._requeue_interrupted(study)

    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[1].params == {} and study.ask(space).params == left_running.params
