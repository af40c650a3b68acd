"""Where the project's folders are, wherever a command runs from (also inside DVC's temp copies), and what
the pipeline's files in them are named."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from soarlab.names.environment import DVC_ROOT_ENV, STATE_DIR_ENV

# DVC runs queued/temp experiments in copies under this folder of the real project.
_DVC_TEMP_EXPS = (".dvc", "tmp", "exps")

# The pipeline's files and folders, each named once (dvc.yaml spells the same paths): in paths.data,
SPEED_SET_FILE = "speed.jsonl"  # the speed set (fetch-data)
CORRECTNESS_SET_FILE = "correctness.jsonl"  # the correctness set (fetch-data)
# in paths.reports,
SCORE_FILE = "score.json"  # the score (kept in git)
REFERENCE_FILE = "reference.json"  # the durations the score measures against (reference)
LOGS_DIR = "logs"  # the stages' and servers' logs (no DVC output)
BENCH_DIR = "bench"  # evaluate's speed reports
ACCURACY_DIR = "accuracy"  # evaluate's correctness reports
# and in a stage's reports folder.
METRICS_FILE = "metrics.json"  # its flat figures (dvc.yaml's `metrics:`, track's `<stage>.<name>`)
PREDICTIONS_FILE = "predictions.jsonl"  # accuracy's: one answer per question
PRUNED_FILE = "pruned.json"  # bench's, when a pruning sweep stopped evaluate: the step and why


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: cwd) that holds `conf/config.yaml`."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "conf" / "config.yaml").is_file():
            return folder
    from soarlab.errors import SoarError

    raise SoarError(
        f"no SOAR Lab project found at or above {here} (no conf/config.yaml)",
        "run the command from inside the project checkout",
    )


def owning_project_root(start: str | Path | None = None) -> Path:
    """The project that owns this checkout: for a DVC temp experiment copy, the real project.

    Tracking must log into one store for all experiments, so it resolves its default
    location against the owning project, not against a temporary copy. DVC tells stages the
    owning repository in DVC_ROOT; the path test covers commands run by hand inside a copy.
    """
    dvc_root = os.environ.get(DVC_ROOT_ENV)
    if dvc_root and (Path(dvc_root) / "conf" / "config.yaml").is_file():
        return Path(dvc_root).resolve()
    root = project_root(start)
    parts = root.parts
    for i in range(len(parts) - len(_DVC_TEMP_EXPS) + 1):
        if parts[i : i + len(_DVC_TEMP_EXPS)] == _DVC_TEMP_EXPS:
            return Path(*parts[:i])
    return root


def cache_dir() -> Path:
    """What this user's runs on this machine may recompute but keep to save time (file digests, the empty
    MLflow store): $XDG_CACHE_HOME/soarlab, else ~/.cache/soarlab."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "soarlab"


def state_dir() -> Path:
    """Where this user's runs on this machine keep what they share (port and GPU leases, the track lock
    of a tracking server): $SOARLAB_STATE_DIR, else <tmp>/soarlab-<uid>."""
    return Path(os.environ.get(STATE_DIR_ENV) or Path(tempfile.gettempdir()) / f"soarlab-{os.getuid()}")


def level_report(bench_dir: Path, level: str) -> Path:
    """A bench level's report (its figures) in the bench reports folder."""
    return bench_dir / f"{level}.json"


def level_requests(bench_dir: Path, level: str) -> Path:
    """A bench level's per-request rows in the bench reports folder."""
    return bench_dir / f"{level}.requests.jsonl"
