#!/usr/bin/env python
"""Time a no-op `dvc repro` (nothing changed since the last one) at one or more git revisions, side by side.

    . .venv/bin/activate && python scripts/bench/bench_noop.py --rev 02d7128 --rev HEAD --repeats 3

Each revision is cloned into a temporary folder and run with its own source (PYTHONPATH) under this
environment's packages: one full `dvc repro`, one more to settle what the first run changed in the
MLflow store, then `--repeats` timed no-op runs. Prints one line per run and a table (median seconds).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import revision  # scripts/bench/: the clone of a revision and its environment


def repro(clone: Path, env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(["dvc", "repro"], cwd=clone, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_noop: dvc repro failed in {clone}: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return time.perf_counter() - t0


def measure(rev: str, repeats: int, tmp: Path) -> list[float]:
    clone = tmp / revision.folder_name(rev)
    revision.clone(rev, clone)
    env = revision.source_env(clone)
    print(f"{rev}: first dvc repro {repro(clone, env):.1f} s, second {repro(clone, env):.1f} s", flush=True)
    times = []
    for i in range(repeats):
        times.append(repro(clone, env))
        print(f"{rev}: no-op {i + 1}: {times[-1]:.2f} s", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", action="append", required=True, help="a git revision (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_noop.") as tmp:
        results = {rev: measure(rev, args.repeats, Path(tmp)) for rev in args.rev}
    print("\n| revision | no-op dvc repro, median s | runs |\n|---|---|---|")
    for rev, times in results.items():
        print(f"| {rev} | {statistics.median(times):.2f} | {', '.join(f'{t:.2f}' for t in times)} |")


if __name__ == "__main__":
    main()
