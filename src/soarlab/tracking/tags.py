"""The tags of a pipeline run: what it ran (git commit, DVC experiment, model, quant, engine, speed set),
the sweep trial it is, and the recipe that reproduces it."""

from __future__ import annotations

import os
import platform
import subprocess

from soarlab.names.environment import (
    COMPARE_ENV, CUDA_DEVICES_ENV, DVC_EXP_BASELINE_ENV, DVC_EXP_NAME_ENV, PARENT_RUN_ENV, SWEEP_ENV, TRIAL_ENV,
    TRIAL_LABEL_ENV,
)
from soarlab.names.mlflow_tags import (
    COMPARE_TAG, CUDA_DEVICES_TAG, DVC_BASELINE_TAG, DVC_EXPERIMENT_TAG, ENGINE_TAG, GIT_COMMIT_TAG, GIT_DIRTY_TAG,
    MACHINE_TAG, MODEL_TAG, PARENT_TAG, QUANT_TAG, SPEC_TAG, SPEED_SET_TAG, SWEEP_TAG, TRIAL_TAG,
)
from soarlab.paths import SCORE_FILE
from soarlab.schema import SoarConfig

# Tags a `soarlab sweep` trial hands to its pipeline's run through the environment (tag -> variable):
# the parent run makes the run a child of the sweep's run in the MLflow UI.
SWEEP_TRIAL_ENV = {PARENT_TAG: PARENT_RUN_ENV, SWEEP_TAG: SWEEP_ENV, TRIAL_TAG: TRIAL_ENV,
                   CUDA_DEVICES_TAG: CUDA_DEVICES_ENV}


def run_context() -> dict[str, str]:
    """The sweep trial this execution is (tag -> value; empty outside `soarlab sweep`): the sweep, its
    parent run and the trial. Not the GPU it got, which says where it ran, not what it is."""
    return {tag: os.environ[var] for tag, var in SWEEP_TRIAL_ENV.items()
            if tag != CUDA_DEVICES_TAG and os.environ.get(var)}


def trial_label() -> str:
    """The sweep trial's label its trial handed down (TRIAL_LABEL_ENV); empty outside `soarlab sweep`."""
    return os.environ.get(TRIAL_LABEL_ENV, "")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_tags(cfg: SoarConfig, speed_set_sha: str) -> dict[str, str]:
    tags = {
        GIT_COMMIT_TAG: _git("rev-parse", "HEAD"),
        # dvc.lock, params.yaml and score.json (a metric kept in git) are rewritten by the pipeline itself.
        GIT_DIRTY_TAG: str(bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!dvc.lock",
                                   ":!params.yaml", f":!{cfg.paths.reports}/{SCORE_FILE}"))),
        DVC_EXPERIMENT_TAG: os.environ.get(DVC_EXP_NAME_ENV, ""),
        DVC_BASELINE_TAG: os.environ.get(DVC_EXP_BASELINE_ENV, ""),
        MODEL_TAG: cfg.model.name,
        QUANT_TAG: cfg.quant.name,
        ENGINE_TAG: cfg.engine.name,
        SPEC_TAG: cfg.spec.name,
        SPEED_SET_TAG: speed_set_sha,
        # Between-run noise is a property of the machine (soarlab.prediction.noise keeps a record per machine).
        MACHINE_TAG: platform.node(),
        COMPARE_TAG: os.environ.get(COMPARE_ENV, ""),
        **{tag: os.environ.get(var, "") for tag, var in SWEEP_TRIAL_ENV.items()},
    }
    return {key: value for key, value in tags.items() if value}


def reproduction_steps(tags: dict[str, str]) -> list[str]:
    steps = [f"git checkout {tags.get(GIT_COMMIT_TAG, '<commit>')}"]
    if tags.get(DVC_EXPERIMENT_TAG):
        steps.append(f"dvc exp apply {tags[DVC_EXPERIMENT_TAG]}")
    steps += ["dvc pull  # or `dvc checkout` where the DVC cache holds the outputs", "dvc repro  # re-runs only what is missing"]
    return steps


def recipe_markdown(tags: dict[str, str]) -> str:
    lines = "\n".join(f"    {step}" for step in reproduction_steps(tags))
    return f"**Reproduce this run** (commit {tags.get(GIT_COMMIT_TAG, '?')}, DVC experiment {tags.get(DVC_EXPERIMENT_TAG) or 'none: dvc repro'}):\n\n{lines}\n"
