"""The tags of a pipeline run: what it ran (git commit, DVC experiment, model, quant, engine, speed set),
the sweep trial it is, and the recipe that reproduces it."""

from __future__ import annotations

import os
import platform
import subprocess

from soarlab.schema import SoarConfig

TRIAL_TAG = "soarlab.trial"  # a sweep trial's overrides, as JSON (soarlab.sweep.record.trial_key)
# Tags a `soarlab sweep` trial hands to its pipeline's run through the environment (tag -> variable):
# the parent run makes the run a child of the sweep's run in the MLflow UI.
SWEEP_TRIAL_ENV = {
    "mlflow.parentRunId": "SOARLAB_PARENT_RUN_ID",
    "soarlab.sweep": "SOARLAB_SWEEP",
    TRIAL_TAG: "SOARLAB_TRIAL",
    "soarlab.cuda_visible_devices": "CUDA_VISIBLE_DEVICES",
}
# What sets a sweep trial apart in its sweep (the overrides the sweep varies), handed to its run's name likewise.
TRIAL_LABEL_ENV = "SOARLAB_TRIAL_LABEL"
# The `soarlab compare --rerun` a run belongs to (soarlab.decide.rerun), through the environment likewise.
COMPARE_ENV = "SOARLAB_COMPARE"
MACHINE_TAG = "soarlab.machine"  # the host a run was measured on
SPEED_SET_TAG = "soarlab.speed_set_sha"  # the content digest of the speed set the run was measured on
SPEC_TAG = "soarlab.spec"  # the run's speculative-decoding preset (spec.name)
ANSWERS_KEY_TAG = "soarlab.answers_key"  # the digest of what decides its answers (soarlab.tracking.lossless)
CONFIG_NAME_TAG = "soarlab.config_name"  # the run's name without its scores (tracking.params.config_name)
CONFIG_TAG = "soarlab.config"  # the artifact holding the run's whole config: its params file (tracking.params.LoggedConfig)
PRUNED_TAG = "soarlab.pruned"  # why a pruning sweep stopped the trial (set by soarlab.sweep.record)


def run_context() -> dict[str, str]:
    """The sweep trial this execution is (tag -> value; empty outside `soarlab sweep`): the sweep, its
    parent run and the trial. Not the GPU it got, which says where it ran, not what it is."""
    return {tag: os.environ[var] for tag, var in SWEEP_TRIAL_ENV.items()
            if tag != "soarlab.cuda_visible_devices" and os.environ.get(var)}


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
        "git.commit": _git("rev-parse", "HEAD"),
        # dvc.lock, params.yaml and score.json (a metric kept in git) are rewritten by the pipeline itself.
        "git.dirty": str(bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!dvc.lock",
                                   ":!params.yaml", f":!{cfg.paths.reports}/score.json"))),
        "dvc.experiment": os.environ.get("DVC_EXP_NAME", ""),
        "dvc.baseline_rev": os.environ.get("DVC_EXP_BASELINE_REV", ""),
        "soarlab.model": cfg.model.name,
        "soarlab.quant": cfg.quant.name,
        "soarlab.engine": cfg.engine.name,
        SPEC_TAG: cfg.spec.name,
        SPEED_SET_TAG: speed_set_sha,
        # Between-run noise is a property of the machine (soarlab.decide.noise keeps a record per machine).
        MACHINE_TAG: platform.node(),
        "soarlab.compare": os.environ.get(COMPARE_ENV, ""),
        **{tag: os.environ.get(var, "") for tag, var in SWEEP_TRIAL_ENV.items()},
    }
    return {key: value for key, value in tags.items() if value}


def reproduction_steps(tags: dict[str, str]) -> list[str]:
    steps = [f"git checkout {tags.get('git.commit', '<commit>')}"]
    if tags.get("dvc.experiment"):
        steps.append(f"dvc exp apply {tags['dvc.experiment']}")
    steps += ["dvc pull  # or `dvc checkout` where the DVC cache holds the outputs", "dvc repro  # re-runs only what is missing"]
    return steps


def recipe_markdown(tags: dict[str, str]) -> str:
    lines = "\n".join(f"    {step}" for step in reproduction_steps(tags))
    return f"**Reproduce this run** (commit {tags.get('git.commit', '?')}, DVC experiment {tags.get('dvc.experiment') or 'none: dvc repro'}):\n\n{lines}\n"
