#!/usr/bin/env python
"""Two CPU pipelines at once: the tiny default's evaluate stage alone and two side by side, at one or
more git revisions (docs/PERFORMANCE.md, "CPU contention").

    . .venv/bin/activate && python scripts/bench/bench_cpu_contention.py --rev c57b0e1 --rev HEAD

Per revision: a clone, run with its own source (PYTHONPATH) under this environment's packages, built
up to evaluate (`dvc repro evaluate`: the default preset quantized and packaged) and copied once. Then
`soarlab stage evaluate` (its own `transformers serve`, accuracy, bench) in the clone alone, then in
the clone and its copy at once, as `dvc queue start -j 2` or two parallel sweep trials run them.
Prints each run's wall and CPU seconds (the stage and everything it started) as a table.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import revision  # scripts/bench/: the clone of a revision and its environment


def start(project: Path, env: dict) -> tuple[subprocess.Popen, float, IO[str]]:
    stderr = revision.error_log()
    proc = subprocess.Popen(["soarlab", "stage", "evaluate"], cwd=project, env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    return proc, time.perf_counter(), stderr


def finish(proc: subprocess.Popen, started: float, stderr: IO[str]) -> tuple[float, float]:
    """(wall s, CPU s of the stage and its reaped children) once it exits."""
    with stderr:
        return revision.wait_timed(proc, started, "the evaluate stage", stderr)


def measure(rev: str, tmp: Path) -> dict[str, list[tuple[float, float]]]:
    clone = tmp / revision.folder_name(rev)
    revision.clone(rev, clone)
    env = revision.source_env(clone)
    built = subprocess.run(["dvc", "repro", "evaluate"], cwd=clone, env=env, capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"bench_cpu_contention: dvc repro evaluate failed at {rev}: {(built.stderr or built.stdout)[-800:]}")
    copy = clone.with_name(clone.name + "-copy")
    shutil.copytree(clone, copy, symlinks=True)
    alone = [finish(*start(clone, env))]
    print(f"{rev}: alone {alone[0][0]:.1f} s wall, {alone[0][1]:.1f} s CPU", flush=True)
    running = [start(project, env) for project in (clone, copy)]
    pair = [finish(*run) for run in running]
    print(f"{rev}: side by side " + ", ".join(f"{w:.1f} s wall / {c:.1f} s CPU" for w, c in pair), flush=True)
    return {"alone": alone, "pair": pair}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", action="append", required=True, help="a git revision (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_cpu_contention.") as tmp:
        results = {rev: measure(rev, Path(tmp)) for rev in args.rev}
    print("\n| revision | alone: wall s / CPU s | side by side, each: wall s / CPU s |\n|---|---|---|")
    for rev, runs in results.items():
        (wall, cpu), = runs["alone"]
        pair = "; ".join(f"{w:.1f} / {c:.1f}" for w, c in runs["pair"])
        print(f"| {rev} | {wall:.1f} / {cpu:.1f} | {pair} |")


if __name__ == "__main__":
    main()
