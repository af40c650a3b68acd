"""Environment variable names: what one process hands another (a sweep trial or `compare --rerun` to the
stages of its pipeline, DVC to a stage; soarlab.names)."""

# What a sweep trial hands its pipeline's track stage, tag by tag (soarlab.tracking.tags.SWEEP_TRIAL_ENV).
PARENT_RUN_ENV = "SOARLAB_PARENT_RUN_ID"
SWEEP_ENV = "SOARLAB_SWEEP"
TRIAL_ENV = "SOARLAB_TRIAL"
CUDA_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"  # set by a GPU lease or a scheduler
TRIAL_LABEL_ENV = "SOARLAB_TRIAL_LABEL"  # what sets the trial apart in its sweep: its run's name
COMPARE_ENV = "SOARLAB_COMPARE"  # the `soarlab compare --rerun` a run belongs to (its COMPARE_TAG)
# Where a sweep trial wants the logs of a stage that failed: its temporary DVC workspace, and the
# reports/logs folder in it, is deleted when `dvc exp run --temp` ends.
TRIAL_LOGS_ENV = "SOARLAB_TRIAL_LOGS"
PRUNE_ENV = "SOARLAB_PRUNE"  # set by a pruning sweep's trial: its settings (JSON); absent: never wait
STATE_DIR_ENV = "SOARLAB_STATE_DIR"  # what runs on one machine share: port and GPU leases, locks
DEBUG_ENV = "SOARLAB_DEBUG"  # not empty nor 0: an error prints its traceback
# What DVC tells the commands it runs.
DVC_STAGE_ENV = "DVC_STAGE"  # the stage's name, for every stage command
DVC_ROOT_ENV = "DVC_ROOT"  # the repository that owns a temporary experiment copy
DVC_EXP_NAME_ENV = "DVC_EXP_NAME"
DVC_EXP_BASELINE_ENV = "DVC_EXP_BASELINE_REV"
DVC_NO_ANALYTICS_ENV = "DVC_NO_ANALYTICS"  # set for the DVC commands SOAR Lab runs itself: no usage report
