"""The trial process's half of pruning (soarlab.pruning): one Optuna trial per sweep trial.

All trials of a sweep, grid or Optuna-sampled, share one Optuna study kept in a journal file under
the sweep's folder (safe for trials that run at once), so a pruner compares a trial with the sweep's
finished ones. The trial reads what evaluate reports, asks the pruner, and writes the decision.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from soarlab.atomic import write_json
from soarlab.experiments import dvc_cache_dir
from soarlab.names.environment import PRUNE_ENV
from soarlab.names.mlflow_tags import TRIAL_TAG
from soarlab.pruning import END, REPORTS, SOAR_PRUNER, decision_path
from soarlab.schema import SweepPruning

JOURNAL = "pruning.journal"
# The Optuna study's user attributes of a trial: its key (as its MLflow tag) and its evaluate time.
TRIAL_ATTR, EVALUATE_S_ATTR = TRIAL_TAG, "soarlab.evaluate_s"


def pruner_config(settings: SweepPruning, hydra_cfg) -> DictConfig | None:
    """The pruner a sweep asked for (`_target_` and arguments): the Optuna sweeper's `hydra.sweeper.pruner`,
    else with `sweep.prune` true `sweep.pruner`, or SOAR's rules where that is null; None: no pruning."""
    chosen = OmegaConf.select(hydra_cfg, "sweeper.pruner", default=None)
    if chosen is None and settings.prune:
        chosen = OmegaConf.create(settings.pruner or {"_target_": SOAR_PRUNER, "slower_pct": settings.slower_pct})
    return chosen


class TrialPruning:
    def __init__(self, sweep_dir: Path, sweep: str, pruner: DictConfig, settings: SweepPruning, logs: Path, key: str):
        import optuna
        from hydra.utils import instantiate
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per trial about the study it opens
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self.pruner = instantiate(pruner)
        storage = JournalStorage(JournalFileBackend(str(sweep_dir / JOURNAL)))
        self.study = optuna.create_study(study_name=sweep, storage=storage, direction="maximize",
                                         pruner=self.pruner, load_if_exists=True)
        self.trial = self.study.ask()
        self.trial.set_user_attr(TRIAL_ATTR, key)
        self.settings = {"s1_fraction": settings.s1_fraction, "decision_timeout_s": settings.decision_timeout_s}
        self.logs, self.lines_read = logs, 0
        self.pruned: dict | None = None  # the report that was pruned, with its reason
        self.evaluate_s: float | None = None

    def env(self) -> dict[str, str]:
        return {PRUNE_ENV: json.dumps(self.settings)}

    def poll(self) -> None:
        """Decide on each complete line evaluate has appended since the last poll."""
        path = self.logs / REPORTS
        lines = path.read_text().split("\n")[:-1] if path.is_file() else []  # the last piece may be unfinished
        for line in lines[self.lines_read:]:
            entry = json.loads(line)
            self.evaluate_s = entry["elapsed_s"]
            if entry["step"] == END:
                continue
            self.trial.report(float(entry["value"]), entry["step"])
            prune = self.trial.should_prune()
            reason = self._reason(entry) if prune else ""
            write_json(decision_path(self.logs, entry["step"]), {"prune": prune, "reason": reason})
            if prune:
                self.pruned = {**entry, "reason": reason}
        self.lines_read = len(lines)

    def _reason(self, entry: dict) -> str:
        explain = getattr(self.pruner, "reason", None)  # SoarPruner says why; Optuna's pruners do not
        frozen = next((t for t in self.study.get_trials(deepcopy=False) if t.number == self.trial.number), None)
        return (explain(self.study, frozen) if explain and frozen else None) or \
            f"{type(self.pruner).__name__} pruned it at step {entry['step']} ({entry['what']} = {entry['value']:.4g})"

    def saved_s(self) -> float | None:
        """Estimated evaluate time saved: the best finished trial's evaluate time minus this one's."""
        from soarlab.pruning.pruner import best_finished

        best = best_finished(self.study)
        full = best.user_attrs.get(EVALUATE_S_ATTR) if best is not None else None
        return round(max(0.0, full - self.evaluate_s), 1) if full is not None and self.evaluate_s is not None else None

    def finish(self, objective: float | None) -> None:
        from optuna.trial import TrialState

        self.poll()
        if self.evaluate_s is not None:
            self.trial.set_user_attr(EVALUATE_S_ATTR, self.evaluate_s)
        if self.pruned is not None:
            self.study.tell(self.trial, state=TrialState.PRUNED)
        elif objective is not None:
            self.study.tell(self.trial, objective)
        else:
            self.study.tell(self.trial, state=TrialState.FAIL)


def forget_pruned_evaluate(root: Path, lock_text: str, env: dict) -> int:
    """Drop the pruned evaluate from DVC's run cache: its partial reports must never stand in for a
    full evaluate of the same inputs (a later trial, `dvc repro`). DVC has no command for this; its
    run cache is one YAML file per run under runs/<2>/<stage key>/, and it takes the newest of a key,
    so an earlier full run of the same inputs is used again. Returns the entries removed."""
    evaluate = (yaml.safe_load(lock_text) or {}).get("stages", {}).get("evaluate", {})
    hashes = {out.get("md5") for out in evaluate.get("outs", []) if out.get("md5")}
    removed = 0
    for entry in (dvc_cache_dir(root, env) / "runs").glob("*/*/*"):
        outs = (yaml.safe_load(entry.read_text()) or {}).get("outs", [])
        if hashes & {out.get("md5") for out in outs}:
            entry.unlink()
            removed += 1
            if not any(entry.parent.iterdir()):  # DVC reads a stage's folder as holding at least one entry
                entry.parent.rmdir()
    return removed
