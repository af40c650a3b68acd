"""How a user names a pipeline run to a decide command: its MLflow run id (or a unique prefix of 8+
characters), its DVC experiment name, `best` (the top of the leaderboard) or `submitted` (the latest run
with official figures); and the config a decide command composes. The runs themselves are read back by
soarlab.tracking.runs.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from soarlab.errors import SoarError
from soarlab.names.mlflow_tags import DVC_EXPERIMENT_TAG, PRUNED_TAG, SUBMITTED_AT_TAG
from soarlab.tracking.runs import RunRecord

_RUN_ID = re.compile(r"^[0-9a-f]{8,32}$")


def decide_config(args):
    """The composed config of a decide command: its Hydra overrides, then --experiment."""
    from soarlab.config import compose

    cfg = compose(args.overrides)
    if getattr(args, "experiment", None):
        cfg.tracking.experiment = args.experiment
    return cfg


def _refuse_pruned(ref: str, runs: Sequence[RunRecord]) -> None:
    """Say so when `ref` names a pruned sweep trial (Runs.pruned), rather than that no such run exists."""
    pruned = [r for r in getattr(runs, "pruned", [])
              if (_RUN_ID.match(ref) and r.run_id.startswith(ref)) or r.tags.get(DVC_EXPERIMENT_TAG) == ref]
    if pruned:
        why = pruned[0].tags.get(PRUNED_TAG, "stopped early")
        raise SoarError(f"run {ref!r} is a sweep trial that was pruned ({why}): it has no full bench",
                        "name a trial that finished (soarlab leaderboard lists them)")


def _refuse_unfinished(ref: str, runs: Sequence[RunRecord]) -> None:
    """Say a run is FAILED or KILLED, rather than that no such run exists."""
    for record, status in getattr(runs, "unfinished", []):
        if (_RUN_ID.match(ref) and record.run_id.startswith(ref)) or record.tags.get(DVC_EXPERIMENT_TAG) == ref:
            raise SoarError(f"run {ref!r} is {status}: it has no result to compare",
                            "name a finished run (soarlab leaderboard lists them); the MLflow UI shows why it failed")


def resolve(ref: str, runs: Sequence[RunRecord], rank: Callable[[RunRecord], float | None]) -> RunRecord:
    """The run a user means by `ref`: a run id (or 8+ character prefix), a DVC experiment name, best, submitted."""
    if not runs:
        _refuse_pruned(ref, runs)
        _refuse_unfinished(ref, runs)
        raise SoarError("no pipeline runs in this MLflow experiment", "run the pipeline first (dvc repro), or pick the experiment with --experiment")
    if ref == "best":
        ranked = [(rank(r), r) for r in runs if rank(r) is not None]
        if not ranked:
            raise SoarError("no run has a final score (every run has an invalid level)", "fix the bench stage (see reports/bench) and re-run")
        return max(ranked, key=lambda pair: pair[0])[1]
    if ref == "submitted":
        submitted = [r for r in runs if r.submitted]
        if not submitted:
            raise SoarError("no run is recorded as submitted", "record one with `soarlab record-submission RUN --S1 .. --S8 .. --Smax .. --accuracy ..`")
        return max(submitted, key=lambda r: r.tags.get(SUBMITTED_AT_TAG, ""))
    by_id = [r for r in runs if _RUN_ID.match(ref) and r.run_id.startswith(ref)]
    if len(by_id) == 1:
        return by_id[0]
    by_exp = [r for r in runs if r.tags.get(DVC_EXPERIMENT_TAG) == ref]
    if by_exp:
        return by_exp[0]  # newest first
    if not by_id:
        _refuse_pruned(ref, runs)
        _refuse_unfinished(ref, runs)
    what = f"{len(by_id)} runs start with {ref!r}" if by_id else f"no run {ref!r} in this experiment"
    raise SoarError(what, "give an MLflow run id (or 8+ of its first characters), a DVC experiment name (dvc exp show), best or submitted")
