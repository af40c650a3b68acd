#!/usr/bin/env python3
"""Time the README's test command on fresh clones, several full runs in a row, with pass counts and the slowest tests.

    python3 scripts/bench/bench_suite.py --rev HEAD --runs 3

Each run clones the revision into a temporary folder and runs the README's test command there, as a
newcomer or CI does on a clean clone (its set-up makes the clone's own .venv; system packages and pip's
cache are the machine's). Prints one line per run as it ends and, at the end, a table of the runs and
the ten slowest tests of the last one, and the CPU seconds per test file of the last one (scripts/bench/pytest_cpu.py,
loaded through PYTEST_ADDOPTS from a folder that holds it alone). Each run's log is kept (its path is
printed) and the clones are removed. Exits 1 when a run had a failure or an error.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import revision  # scripts/bench/: the clone of a revision
from revision import ROOT

HERE = Path(__file__).resolve().parent
SUMMARY = re.compile(r"^=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<when>setup|call|teardown) +(?P<test>\S+)")


def readme_test_command() -> str:
    """The second of the README's two commands (scripts/readme_commands.sh, as newcomer.sh reads them)."""
    read = subprocess.run(["bash", str(ROOT / "scripts" / "readme_commands.sh")], capture_output=True, text=True)
    if read.returncode != 0:
        sys.exit(f"bench_suite: {read.stderr.strip().removeprefix('readme_commands: ')}")
    return read.stdout.splitlines()[1]


def counts(summary: str) -> dict[str, int]:
    """pytest's summary ("446 passed, 1 skipped, 30 warnings") as {"passed": 446, ...}."""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}


def one_run(rev: str, command: str, logs: Path, index: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_suite.") as tmp:
        clone = Path(tmp) / "soarlab"
        commit = revision.clone(rev, clone)
        log = logs / f"run{index}-{commit}.log"
        plugin = Path(tmp) / "plugin"
        plugin.mkdir()
        shutil.copy(HERE / "pytest_cpu.py", plugin)
        env = {**os.environ, "PYTHONPATH": str(plugin), "PYTEST_ADDOPTS": "-p pytest_cpu",
               "PYTEST_CPU_DIR": str(logs / f"run{index}-cpu")}
        t0 = time.perf_counter()
        with open(log, "w") as out:
            code = subprocess.run(["bash", "-c", command], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
        total = time.perf_counter() - t0
    lines = log.read_text(errors="replace").splitlines()
    summary = next((m for m in map(SUMMARY.match, reversed(lines)) if m), None)
    slowest = [m.groupdict() for m in map(DURATION.match, lines) if m][:10]
    return {"commit": commit, "exit": code, "total_s": total, "log": log, "slowest": slowest,
            "counts": counts(summary["counts"]) if summary else {}, "pytest_s": float(summary["seconds"]) if summary else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default="HEAD", help="the git revision to run (default HEAD)")
    parser.add_argument("--runs", type=int, default=3, help="full runs in a row (default 3)")
    args = parser.parse_args()
    if shutil.which("git") is None:
        sys.exit("bench_suite: git is not installed. Fix: apt-get install git")
    command = readme_test_command()
    logs = Path(tempfile.mkdtemp(prefix="bench_suite-logs."))
    print(f"bench_suite: `{command}` at {args.rev}, {args.runs} runs; logs in {logs}", flush=True)
    runs = []
    for i in range(1, args.runs + 1):
        run = one_run(args.rev, command, logs, i)
        runs.append(run)
        print(f"run {i}: exit {run['exit']}, {run['counts']}, pytest {run['pytest_s']} s, "
              f"{run['total_s']:.0f} s in all (log {run['log']})", flush=True)
    print("\n| run | commit | passed | failed | errors | skipped | pytest s | in all s |\n|---|---|---|---|---|---|---|---|")
    for i, run in enumerate(runs, 1):
        c = run["counts"]
        print(f"| {i} | {run['commit']} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('error', 0) + c.get('errors', 0)} "
              f"| {c.get('skipped', 0)} | {run['pytest_s']} | {run['total_s']:.0f} |")
    print("\nThe ten slowest of the last run:\n\n| s | phase | test |\n|---|---|---|")
    for row in runs[-1]["slowest"]:
        print(f"| {row['seconds']} | {row['when']} | {row['test']} |")
    print("\nCPU seconds per test file of the last run:\n", flush=True)
    subprocess.run([sys.executable, str(HERE / "pytest_cpu.py"), str(logs / f"run{len(runs)}-cpu")])
    sys.exit(0 if all(r["exit"] == 0 for r in runs) else 1)


if __name__ == "__main__":
    main()
