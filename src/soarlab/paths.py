"""Where the project's folders are, wherever a command runs from (also inside DVC's temp copies)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from soarlab.names.environment import DVC_ROOT_ENV, STATE_DIR_ENV

# DVC runs queued/temp experiments in copies under this folder of the real project.
_DVC_TEMP_EXPS = (".dvc", "tmp", "exps")


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


def state_dir() -> Path:
    """Where this user's runs on this machine keep what they share (port and GPU leases, the track lock
    of a tracking server): $SOARLAB_STATE_DIR, else <tmp>/soarlab-<uid>."""
    return Path(os.environ.get(STATE_DIR_ENV) or Path(tempfile.gettempdir()) / f"soarlab-{os.getuid()}")
