"""`hydra/sweeper=optuna`: Optuna search over Hydra's own sweep syntax, on current Optuna.

It stands in for hydra-optuna-sweeper 1.3, which holds Optuna at 2.10, whose study storage fails
with the SQLAlchemy 2 that MLflow needs (see the README); without a storage a sweep cannot resume.

The search space is `hydra.sweeper.params` plus the command line's sweeps, in Hydra's syntax:
`a,b` or `choice(a,b)` and `range(1,5)` and `glob(...)` become categorical choices;
`interval(lo,hi)` a float range (`tag(log, interval(...))` log-scaled, `tag(int, interval(...))`
integers). Trials are asked in batches of `n_jobs` and launched with whatever launcher is set.
The study lives in `storage` (default: optuna.db in the sweep folder), so running the same sweep
again continues it: finished trials count, trials cut off by an interruption are asked again.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override, Transformer
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

import soarlab.sweep  # noqa: F401  (registers ${soarlab.parallel_trials:})
from soarlab.pruning import PrunedTrial

log = logging.getLogger(__name__)


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.soarlab_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    direction: str = "maximize"
    n_trials: int = 8
    n_jobs: Any = "${soarlab.parallel_trials:}"  # trials launched at once: one per GPU, 1 without
    sampler: str = "tpe"            # tpe | random
    seed: Optional[int] = None
    storage: Optional[str] = None   # an Optuna storage URL; null: sqlite in the sweep folder
    study_name: Optional[str] = None  # null: the sweep folder's name
    params: Dict[str, str] = field(default_factory=dict)
    # An Optuna pruner (`_target_`, e.g. optuna.pruners.MedianPruner, or soarlab.pruning.pruner.SoarPruner):
    # each trial then reports evaluate's intermediate results to it (soarlab.sweep.pruning); null: the
    # sweep's `sweep.prune` / `sweep.pruner` decide.
    pruner: Optional[Any] = None


ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="soarlab")


def distribution(override: Override) -> Any:
    """An Optuna distribution for one swept override."""
    import optuna.distributions as dist

    value = override.value()
    if isinstance(value, IntervalSweep):
        low, high = value.start, value.end
        if "int" in value.tags:
            return dist.IntDistribution(int(low), int(high), log="log" in value.tags)
        return dist.FloatDistribution(float(low), float(high), log="log" in value.tags)
    choices = list(override.sweep_string_iterator())
    return dist.CategoricalDistribution(choices)


class OptunaSweeper(Sweeper):
    def __init__(self, direction: str, n_trials: int, n_jobs: int, sampler: str, seed: Optional[int],
                 storage: Optional[str], study_name: Optional[str], params: Optional[Dict[str, str]] = None,
                 pruner: Optional[Any] = None):
        self.direction, self.n_trials, self.n_jobs = direction, n_trials, max(1, n_jobs)
        self.sampler_name, self.seed = sampler, seed
        self.storage, self.study_name = storage, study_name
        self.params = dict(params or {})
        self.pruner = pruner  # read by each trial from its Hydra config (soarlab.sweep.pruning.pruner_config)
        self.job_idx = 0

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def _space(self, arguments: List[str]) -> tuple[dict, list[str]]:
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([f"{k}={v}" for k, v in self.params.items()] + list(arguments))
        space, fixed = {}, []
        for override in overrides:
            key = override.get_key_element()
            if override.is_sweep_override():
                space[key] = distribution(override)
            else:
                fixed.append(f"{key}={override.get_value_element_as_str()}")
        return space, fixed

    def _study(self):
        import optuna

        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        storage = self.storage or f"sqlite:///{sweep_dir / 'optuna.db'}"
        samplers = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
        if self.sampler_name not in samplers:
            raise ValueError(f"hydra.sweeper.sampler={self.sampler_name}: use one of {', '.join(samplers)}")
        return optuna.create_study(study_name=self.study_name or sweep_dir.name, storage=storage,
                                   sampler=samplers[self.sampler_name](seed=self.seed),
                                   direction=self.direction, load_if_exists=True)

    @staticmethod
    def _requeue_interrupted(study) -> None:
        """Trials left RUNNING by an interrupted sweep never finished: fail them and ask them again."""
        from optuna.trial import TrialState

        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(trial.number, state=TrialState.FAIL)
            # Not enqueue_trial(skip_if_exists=True): the failed trial itself has these params, so it would skip.
            waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if all(w.system_attrs.get("fixed_params") != trial.params for w in waiting):
                study.enqueue_trial(trial.params)

    def sweep(self, arguments: List[str]) -> None:
        from optuna.trial import TrialState

        space, fixed = self._space(arguments)
        if not space:
            raise ValueError("nothing to search: give a sweep such as quant=gptq_w4,gptq_w8 or sweep=quant")
        study = self._study()
        self._requeue_interrupted(study)
        OmegaConf.save(self.config, Path(str(self.config.hydra.sweep.dir)) / "multirun.yaml")
        finished = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        done = len(study.get_trials(deepcopy=False, states=finished))
        if done:
            log.info(f"Resuming study {study.study_name}: {done} of {self.n_trials} trials finished")
        while done < self.n_trials:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - done))]
            batch = [fixed + [f"{k}={v if isinstance(v, str) else Transformer.encode(v)}"
                              for k, v in t.params.items()] for t in trials]
            returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(batch)
            for trial, ret in zip(trials, returns):
                value = ret.return_value if ret.status == JobStatus.COMPLETED else None
                if isinstance(value, PrunedTrial):
                    study.tell(trial, state=TrialState.PRUNED)
                elif value is None:
                    study.tell(trial, state=TrialState.FAIL)
                else:
                    study.tell(trial, float(value))
            done += len(batch)
        if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            log.info(f"Best value {study.best_value} with {study.best_params}")
