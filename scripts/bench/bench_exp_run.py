#!/usr/bin/env python
"""What one rerun of the pipeline costs beside the serving: the wall and CPU seconds of a `dvc exp run
--temp` that re-runs evaluate and every stage after it, as each `soarlab compare --rerun` and each
serving-only sweep trial does (docs/PERFORMANCE.md, "A pipeline run's own cost").

    . .venv/bin/activate && python scripts/bench/bench_exp_run.py --rev 37ff0ae --rev HEAD --repeats 3 --pure-yaml

A loopback server (soarlab.bench.loopback) answers at once, so the seconds are DVC's, the stages'
processes' and the bench client's own. Per revision: a clone run with its own source (PYTHONPATH) under
this environment's packages, and one full `dvc exp run` on the loopback (`engine=external`,
`quant=none`, one timed run per level). Then `--repeats` rounds, each one rerun (a fresh `bench.rerun`)
of every variant in turn, so that a drift of the machine falls on all of them alike. `--pure-yaml` adds
a variant of each revision with ruamel.yaml's C loader hidden, as in an environment without
ruamel.yaml.clib. Prints each rerun and a table of medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import revision  # scripts/bench/: the clone of a revision and its environment

PIPELINE = ["-S", "quant=none", "-S", "engine=external", "-S", "bench.pause_after_flush_s=0",
            "-S", "eval.retries=0", "-S", "bench.repeats=1"]


def exp_run(clone: Path, env: dict, url: str, *extra: str) -> tuple[float, float]:
    """(wall s, CPU s of `dvc` and everything it started) of one `dvc exp run`."""
    return revision.run_timed(["dvc", "exp", "run", *PIPELINE, "-S", f"engine.url={url}", *extra],
                              f"dvc exp run in {clone}", cwd=clone, env=env)


def variants(revs: list[str], pure_yaml: bool, tmp: Path, url: str) -> dict[str, tuple[Path, dict]]:
    """label -> (clone, environment), each clone after its first run; its pure-YAML variant shares its folder."""
    hidden = tmp / "no-c-yaml"
    hidden.mkdir()
    (hidden / "_ruamel_yaml.py").write_text('raise ImportError("hidden by bench_exp_run --pure-yaml")\n')
    found = {}
    for rev in revs:
        clone = tmp / revision.folder_name(rev)
        commit = revision.clone(rev, clone)
        env = revision.source_env(clone)
        wall, cpu = exp_run(clone, env, url)
        print(f"{rev} ({commit}): first run {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        found[f"{rev} ({commit})"] = (clone, env)
        if pure_yaml:
            pure = {**env, "PYTHONPATH": f"{hidden}{os.pathsep}{env['PYTHONPATH']}"}
            found[f"{rev} ({commit}), pure-Python YAML"] = (clone, pure)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", action="append", required=True, help="a git revision (repeatable)")
    parser.add_argument("--repeats", type=int, default=3, help="reruns of each variant (default 3)")
    parser.add_argument("--pure-yaml", action="store_true",
                        help="also each revision with ruamel.yaml's C loader hidden")
    args = parser.parse_args()
    from soarlab.bench.loopback import LoopbackServer

    with tempfile.TemporaryDirectory(prefix="bench_exp_run.") as tmp, LoopbackServer() as server:
        found = variants(args.rev, args.pure_yaml, Path(tmp), server.base_url)
        results: dict[str, list[tuple[float, float]]] = {label: [] for label in found}
        for i in range(args.repeats):
            for n, (label, (clone, env)) in enumerate(found.items()):
                wall, cpu = exp_run(clone, env, server.base_url, "--temp", "-S", f"bench.rerun=round{i}-variant{n}")
                results[label].append((wall, cpu))
                print(f"{label}: rerun {i + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    print("\n| variant | rerun: median wall s | median CPU s | CPU s of each |\n|---|---|---|---|")
    for label, runs in results.items():
        cpu = [c for _, c in runs]
        print(f"| {label} | {statistics.median(w for w, _ in runs):.1f} | {statistics.median(cpu):.1f} | "
              f"{', '.join(f'{c:.1f}' for c in cpu)} |")


if __name__ == "__main__":
    main()
