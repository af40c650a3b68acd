"""`soarlab compare A B --rerun N`: run both configurations again, interleaved, as real runs.

Each rerun is a DVC experiment (`dvc exp run --temp`, as a sweep trial) with the run's own config
(its Hydra overrides, rebuilt from its MLflow params) and `bench.rerun` set to a fresh value: a
param only the evaluate stage reads, so DVC starts a fresh server and measures again while every
upstream stage (quantize) comes from its run cache. Interleaving (A B A B ...) spreads a drift of the
machine over both sides instead of onto one. The track stage logs each as a usual MLflow run, tagged
`soarlab.compare` with the comparison's id.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

from soarlab.schema import SoarConfig
from soarlab.tracking.params import overrides_of
from soarlab.tracking.runs import RunRecord, load_runs
from soarlab.errors import SoarError
from soarlab.experiments import failure_reason, run_experiment
from soarlab.names.environment import COMPARE_ENV
from soarlab.names.mlflow_tags import COMPARE_TAG, DVC_EXPERIMENT_TAG
from soarlab.paths import project_root

RERUN_KEY = "bench.rerun"


def rerun_overrides(run: RunRecord, token: str) -> list[str]:
    """The run's config as Hydra overrides, with `bench.rerun` set to `token`."""
    return [o for o in overrides_of(run.config, [RERUN_KEY]) if not o.startswith(RERUN_KEY + "=")] + [f"{RERUN_KEY}={token}"]


def rerun_pair(cfg: SoarConfig, a: RunRecord, b: RunRecord, n: int) -> tuple[list[RunRecord], list[RunRecord]]:
    """Run A and B `n` times each, A B A B ...; return their MLflow runs (A's, B's)."""
    root = project_root()
    ident = "compare-" + hashlib.sha1(f"{a.run_id} {b.run_id} {time.time()}".encode()).hexdigest()[:8]
    log_path = root / ".dvc" / "tmp" / "compare" / f"{ident}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, COMPARE_ENV: ident}
    names: dict[str, list[str]] = {"A": [], "B": []}
    with open(log_path, "a") as log:
        for i in range(1, n + 1):
            for label, run in (("A", a), ("B", b)):
                name = f"{ident}-{label}{i}"
                print(f"rerun {i}/{n} of {label} ({run.name}): dvc exp run {name}", file=sys.stderr, flush=True)
                code = run_experiment(root, name, rerun_overrides(run, f"{ident}-{label}{i}"), env,
                                      cfg.decide.compare.rerun_timeout_s, log, lambda: None, pull=False)
                if code != 0:
                    why = "timed out (decide.compare.rerun_timeout_s)" if code is None else \
                        failure_reason(Path(log_path).read_text(errors="replace"), code)
                    raise SoarError(f"rerun {name} of {run.name} failed: {why}", f"read {log_path}, fix the cause, and compare again")
                names[label].append(name)
    _, _, runs = load_runs(cfg)
    by_name = {r.tags.get(DVC_EXPERIMENT_TAG): r for r in runs if r.tags.get(COMPARE_TAG) == ident}
    missing = [x for side in names.values() for x in side if x not in by_name]
    if missing:
        raise SoarError(f"reruns {', '.join(missing)} logged no MLflow run", f"read {log_path}: the track stage must run in each")
    return [by_name[x] for x in names["A"]], [by_name[x] for x in names["B"]]
