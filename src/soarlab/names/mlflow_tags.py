"""MLflow tag names: what a run carries, written by track, a sweep or a decide command and read back by the
others (soarlab.names)."""

# --- MLflow tags of a pipeline run (soarlab.tracking.tags.run_tags) -----------------------------------
GIT_COMMIT_TAG = "git.commit"
GIT_DIRTY_TAG = "git.dirty"  # uncommitted changes besides the files the pipeline rewrites
DVC_EXPERIMENT_TAG = "dvc.experiment"  # the DVC experiment it ran as: what `dvc exp apply` takes
DVC_BASELINE_TAG = "dvc.baseline_rev"
MODEL_TAG = "soarlab.model"  # model.name: runs are compared only within one model and speed set
QUANT_TAG = "soarlab.quant"
ENGINE_TAG = "soarlab.engine"
SPEC_TAG = "soarlab.spec"  # the run's speculative-decoding preset (spec.name)
SPEED_SET_TAG = "soarlab.speed_set_sha"  # the content digest of the speed set the run was measured on
MACHINE_TAG = "soarlab.machine"  # the host a run was measured on
COMPARE_TAG = "soarlab.compare"  # the `soarlab compare --rerun` it is a rerun of (soarlab.decide.rerun)
ANSWERS_KEY_TAG = "soarlab.answers_key"  # the digest of what decides its answers (soarlab.tracking.lossless)
CONFIG_NAME_TAG = "soarlab.config_name"  # the run's name without its scores (tracking.params.config_name)
CONFIG_TAG = "soarlab.config"  # the artifact holding the run's whole config: its params file (tracking.params.LoggedConfig)
INPUTS_DIGEST_TAG = "soarlab.inputs_digest"  # what a no-op re-run is recognised by (tracking.run_page)
NOTE_TAG = "mlflow.note.content"  # MLflow's: the description its run page shows
# On the logged checkpoint (tracking.run_page.log_checkpoint): where DVC keeps it.
DVC_PATH_TAG = "soarlab.dvc_path"
DVC_MD5_TAG = "soarlab.dvc_md5"

# --- of a sweep (soarlab.sweep.record): its parent run, and a child run per trial ----------------------
PARENT_TAG = "mlflow.parentRunId"  # MLflow's: shows a trial's run under its sweep's
SWEEP_TAG = "soarlab.sweep"  # the sweep's name
ROLE_TAG = "soarlab.role"  # "sweep" on a sweep's parent run
VARIES_TAG = "soarlab.sweep_varies"  # on the parent run: the keys the sweep varies (JSON list)
COMMAND_TAG = "soarlab.command"  # on the parent run: the sweep's command line
BEST_OVERRIDES_TAG = "soarlab.best_overrides"  # on the finished parent run: the best trial's overrides
BEST_RUN_ID_TAG = "soarlab.best_run_id"
TRIAL_TAG = "soarlab.trial"  # the trial's key: its sorted overrides (JSON)
CUDA_DEVICES_TAG = "soarlab.cuda_visible_devices"  # the GPU the trial's lease gave it
GPU_TAG = "soarlab.gpu"
TRIAL_STARTED_TAG = "soarlab.trial_started"  # Unix time, as the trial process saw it
TRIAL_ENDED_TAG = "soarlab.trial_ended"
TRIAL_LOG_TAG = "soarlab.trial_log"  # the trial's own log file
FAILURE_TAG = "soarlab.failure"  # why the trial failed
PRUNED_TAG = "soarlab.pruned"  # why a pruning sweep stopped the trial
PRUNED_STEP_TAG = "soarlab.pruned_step"

# --- of the decide commands (soarlab.decide) ---------------------------------------------------------
SUBMITTED_TAG = "soarlab.submitted"  # "true" on a run whose official figures are recorded
SUBMITTED_AT_TAG = "soarlab.submission.recorded_at"
SUBMISSION_NOTE_TAG = "soarlab.submission.note"
KIND_TAG = "soarlab.kind"  # set on runs that are not pipeline executions (the leaderboard's own run)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # MLflow's, on an experiment: which page its UI opens on
