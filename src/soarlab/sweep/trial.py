"""One sweep trial: one DVC experiment, run in its own temporary workspace (`dvc exp run --temp`).

Hydra calls `run_trial` once per trial, on whichever machine its launcher picked. The trial's
overrides go to DVC as `-S`, so `dvc exp show` / `dvc exp apply` see every trial and DVC's run
cache skips every stage whose inputs a finished trial already had (a serving-only change never
re-quantizes). The score comes back from the experiment's commit (reports/score.json).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from soarlab.config import plain
from soarlab.bench.metrics import level_key
from soarlab.domain import LEVELS
from soarlab.experiments import experiment_file, experiment_score, failure_reason, run_experiment
from soarlab.names.environment import PARENT_RUN_ENV, SWEEP_ENV, TRIAL_ENV, TRIAL_LABEL_ENV, TRIAL_LOGS_ENV
from soarlab.names.mlflow_tags import GPU_TAG, SPEED_SET_TAG, TRIAL_ENDED_TAG, TRIAL_LOG_TAG, TRIAL_STARTED_TAG
from soarlab.paths import SCORE_FILE, project_root
from soarlab.schema import SoarConfig, validate, validate_sweep, validate_trial
from soarlab.sweep.gpu_lease import gpu_lease, try_lock
from soarlab.pruning import PrunedTrial
from soarlab.sweep.pruning import TrialPruning, forget_pruned_evaluate, pruner_config
from soarlab.sweep.record import SweepRecord, TrialResult, experiment_name, trial_key, trial_label
from soarlab.tracking.durations import answer_reference_ahead
from soarlab.tracking.params import override_key

# Override keys that configure the sweep itself, not the pipeline: never handed to `dvc exp run -S`.
_SWEEP_KEYS = ("hydra", "sweep", "trial")
_ABSENT = object()


def pipeline_overrides(task_overrides: Sequence[str], always: Sequence[str], cfg: SoarConfig) -> list[str]:
    """The trial's pipeline overrides, plus `always` (e.g. engine.port=0) where the trial sets no such key
    and its config has one (engine=external has no port: it starts no server)."""
    own = [o for o in task_overrides if override_key(o).split(".")[0] not in _SWEEP_KEYS]
    return own + [o for o in always if override_key(o) not in {override_key(x) for x in own}
                  and _has_key(cfg, override_key(o))]


def _has_key(cfg: SoarConfig, key: str) -> bool:
    """Whether the typed config has the dotted `key` (a field of its models or a key of its dicts)."""
    node: object = cfg
    for part in key.split("."):
        node = node.get(part, _ABSENT) if isinstance(node, dict) else getattr(node, part, _ABSENT)
        if node is _ABSENT:
            return False
    return True


def _locks(root: Path) -> Path:
    return root / ".dvc" / "tmp" / "sweep-locks"


@contextlib.contextmanager
def quantize_once(root: Path, cfg: SoarConfig) -> Iterator[Callable[[], None]]:
    """Trials that share a quant preset (the quantize stage's params) wait until the first of them
    is past quantize; the others then take its checkpoint from DVC's run cache instead of quantizing
    side by side. Yields `release`, which the first trial calls once its quantize stage is done."""
    preset = {"quant": plain(cfg.quant), "model": cfg.model.name}
    ident = hashlib.sha256(json.dumps(preset, sort_keys=True).encode()).hexdigest()[:16]
    done = _locks(root) / f"quantize-{ident}.done"
    held = [None if done.exists() else try_lock(_locks(root) / f"quantize-{ident}.lock")]

    def release() -> None:
        if held[0] is not None:
            done.touch()
            held[0].close()
            held[0] = None

    if done.exists():  # the first such trial got past quantize while this one waited
        release()
    try:
        yield release
    finally:
        release()


def dvc_remote(root: Path, name: str | None, env: dict) -> str | None:
    """The DVC remote trials share checkpoints through: trial.remote, else the project's default."""
    if name:
        return name
    default = subprocess.run(["dvc", "remote", "default"], cwd=root, env=env, capture_output=True, text=True)
    return (default.stdout.strip() or None) if default.returncode == 0 else None


def push_experiment(root: Path, name: str, git_remote: str, remote: str, env: dict, log) -> None:
    """Send the experiment to the team: its commit to `git_remote`, its outputs and DVC's run cache
    to the DVC remote, so that a trial elsewhere (`dvc exp run --pull`) takes them instead of re-running."""
    cmd = ["dvc", "--wait-for-lock", "exp", "push", "--run-cache", "-r", remote, git_remote, name]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    with try_lock(_locks(root) / "push.lock"):
        pushed = subprocess.run(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT).returncode == 0
    if not pushed:
        print(f"[trial] warning: could not push {name} to git remote {git_remote!r} and DVC remote "
              f"{remote!r} (see {log.name}); its results stay on this machine", flush=True)


def run_trial(cfg: DictConfig) -> float | PrunedTrial | None:
    """Hydra's task function: run one trial (or recall it, when a resumed sweep already finished it)
    and return its objective (None for a failed trial, PrunedTrial for a pruned one). Hydra hands it a
    DictConfig; what the trial reads is typed first, so a bad trial.*, sweep.* or pipeline key fails here,
    in one line, before any work."""
    trial = validate_trial(cfg.trial)
    settings = validate_sweep(cfg.sweep)
    pipeline = validate(OmegaConf.masked_copy(cfg, list(SoarConfig.model_fields)), "the trial's config")
    hydra_cfg = HydraConfig.get()
    root = project_root(hydra_cfg.runtime.cwd)
    sweep = os.environ[SWEEP_ENV]
    overrides = pipeline_overrides(hydra_cfg.overrides.task, trial.always, pipeline)
    key = trial_key(overrides)
    record = SweepRecord(pipeline, sweep)
    varies = record.varies()
    earlier = record.finished(key)
    if earlier is not None:
        print(f"[trial] {earlier.line(varies)}  (finished earlier in this sweep; not run again)", flush=True)
        return PrunedTrial(earlier.pruned) if earlier.pruned is not None else earlier.objective
    name = experiment_name(sweep, overrides)
    out_dir = Path(hydra_cfg.runtime.output_dir)
    log_path, logs_dir = out_dir / "trial.log", out_dir / "logs"
    shutil.rmtree(logs_dir, ignore_errors=True)  # a resumed trial's earlier attempt's
    pruner = pruner_config(settings, hydra_cfg)
    pruning = None if pruner is None else TrialPruning(Path(hydra_cfg.sweep.dir), sweep, pruner, settings, logs_dir, key)
    started = time.time()
    with open(log_path, "a") as log, quantize_once(root, pipeline) as quantized, \
            gpu_lease(Path(trial.jit_cache_dir).expanduser()) as lease:
        env = {**os.environ, **lease.env, PARENT_RUN_ENV: record.parent_id() or "",
               TRIAL_ENV: key, TRIAL_LABEL_ENV: trial_label(overrides, varies),
               TRIAL_LOGS_ENV: str(logs_dir.resolve()),
               **(pruning.env() if pruning else {})}
        remote = dvc_remote(root, trial.remote, env)
        returncode = run_experiment(root, name, overrides, env, trial.timeout_s, log, quantized,
                                     pull=remote is not None, on_poll=pruning.poll if pruning else None)
        if returncode == 0 and remote is not None:
            push_experiment(root, name, trial.git_remote, remote, env, log)
    tags = {GPU_TAG: lease.gpu or "none", TRIAL_STARTED_TAG: f"{started:.3f}",
            TRIAL_ENDED_TAG: f"{time.time():.3f}", TRIAL_LOG_TAG: str(log_path)}
    result = _result(root, name, overrides, returncode, log_path, pipeline.paths.reports, trial.timeout_s)
    if pruning is not None:
        pruning.finish(result.objective)
        if result.pruned is not None:
            forget_pruned_evaluate(root, experiment_file(root, name, "dvc.lock") or "", env)
    if result.failure is not None:
        result.run_id = record.record_failure(overrides, result.failure, tags,
                                              logs=[log_path, *sorted(logs_dir.glob("*"))])
    else:
        result.run_id = record.child_run(key)
        for tag, value in tags.items():
            record.client.set_tag(result.run_id, tag, value)
        if result.pruned is not None and pruning is not None and pruning.pruned is not None:
            saved = pruning.saved_s()
            record.record_pruned(result.run_id, pruning.pruned, saved)
            print(f"[trial] pruned: about {saved if saved is not None else '?'} s of evaluate saved", flush=True)
        # These writes undid the answer the trial's track remembered for the next trial's reference stage
        speed_set_sha = record.client.get_run(result.run_id).data.tags.get(SPEED_SET_TAG)
        if speed_set_sha:
            answer_reference_ahead(pipeline, speed_set_sha)
    print(f"[trial] {result.line(varies)}", flush=True)
    if result.failure is not None:  # the line is cut to fit a terminal: where the whole story is
        print(f"[trial] its error and logs in full: {out_dir}", flush=True)
    return PrunedTrial(result.pruned) if result.pruned is not None else result.objective


def _result(root: Path, name: str, overrides: list[str], returncode: int | None, log_path: Path,
            reports: str, timeout_s: float) -> TrialResult:
    if returncode is None:
        return TrialResult(overrides, failure=f"timeout: still running after {timeout_s:.0f} s (trial.timeout_s)")
    if returncode != 0:
        return TrialResult(overrides, failure=failure_reason(log_path.read_text(errors="replace"), returncode))
    score = experiment_score(root, name, f"{reports}/{SCORE_FILE}")
    if score is None:
        return TrialResult(overrides, failure=f"experiment {name} has no {reports}/{SCORE_FILE}")
    if score.get("pruned"):
        return TrialResult(overrides, pruned=score["pruned_reason"])
    durations = {lvl: score.get(level_key(lvl, "duration_s")) for lvl in LEVELS}
    if not score.get("valid"):
        levels = ", ".join(score.get("invalid_levels") or [])
        return TrialResult(overrides, durations=durations, failure=f"invalid level(s) {levels} (see reports/bench)")
    return TrialResult(overrides, final=score["final"], C=score["C"], durations=durations)
