"""Wall time of a sweep with pruning (`sweep.prune=true`) against the same sweep without, on the tiny default.

Each sweep runs in a fresh project copy (no outputs, no DVC run cache shared between them). Reported per
sweep: the whole sweep's wall time, the time until its best trial had finished (both sweeps must pick
the same best; the script says so when they differ), and the trials pruned. Run from the project root:
`python scripts/bench/bench_pruning.py [--space OVERRIDE ...]` (default: SPACE, 3 trials).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import mlflow

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support import make_fresh_project  # noqa: E402  (the tests' project-copy helper: a git repo, no outputs)

# On the tiny model gptq_w4 scores C = 0 (pruned at the accuracy gate), none and gptq_w8 C = 1. The
# unquantized trial runs first, so the others have a finished trial to be compared with.
SPACE = ["quant=none,gptq_w4,gptq_w8"]
FIXED = ["bench.dataset.num_requests=4"]


def run_sweep(dest: Path, env: dict, name: str, extra: list[str], space: list[str]) -> dict:
    start = time.time()
    proc = subprocess.run(["soarlab", "sweep", "--name", name, *FIXED, *extra, *space], cwd=dest, env=env,
                          capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        sys.exit(f"sweep {name} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    client = mlflow.MlflowClient(f"sqlite:///{dest / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("soarlab").experiment_id
    parent = client.search_runs([experiment], f"tags.`soarlab.sweep` = '{name}' and tags.`soarlab.role` = 'sweep'")[0]
    best = client.get_run(parent.data.tags["soarlab.best_run_id"])
    return {"wall": wall, "to_best": float(best.data.tags["soarlab.trial_ended"]) - start,
            "best": parent.data.tags["soarlab.best_overrides"], "pruned": int(parent.data.metrics.get("trials.pruned", 0)),
            "trials": int(parent.data.metrics["trials.finished"]), "table": proc.stdout[proc.stdout.rfind("best first"):]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--space", nargs="*", default=SPACE, help="the sweep's overrides (Hydra sweep syntax)")
    space = parser.parse_args().space
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-pruning-") as tmp:
        for label, extra in (("without pruning", []), ("with pruning", ["sweep.prune=true"])):
            dest, env = make_fresh_project(Path(tmp) / label.replace(" ", "-"))
            results[label] = run_sweep(dest, env, "bench", extra, space)
            print(f"{label}: {results[label]['table']}", flush=True)
    plain, pruned = results["without pruning"], results["with pruning"]
    if plain["best"] != pruned["best"]:  # reported, not hidden: the S1 rule can prune a trial on a noisy machine
        print(f"WARNING: the best trials differ: {plain['best']!r} without pruning, {pruned['best']!r} with")
    print(f"\n{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, space: {' '.join(space)}, fixed: {' '.join(FIXED)}")
    print(f"best trial: {plain['best']} (without pruning), {pruned['best']} (with)")
    print("| sweep | trials | pruned | wall s | s until the best trial finished |\n|---|---|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['trials']} | {r['pruned']} | {r['wall']:.0f} | {r['to_best']:.0f} |")
    print(f"| ratio (without / with) | | | {plain['wall'] / pruned['wall']:.2f}x | {plain['to_best'] / pruned['to_best']:.2f}x |")


if __name__ == "__main__":
    main()
