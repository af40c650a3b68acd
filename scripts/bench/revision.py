"""A git revision of this project in a folder of its own, for the benchmark scripts that compare
revisions side by side (bench_noop, bench_cpu_contention, bench_exp_run, bench_setup, bench_suite), and
the time a command takes there."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


def clone(rev: str, dest: Path) -> str:
    """Clone this repository into `dest` at `rev` (as a fresh clone holds it); return the short commit."""
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(dest)], check=True)
    subprocess.run(["git", "checkout", "-q", rev], cwd=dest, check=True)
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=dest, capture_output=True, text=True,
                          check=True).stdout.strip()


def source_env(dest: Path) -> dict[str, str]:
    """The environment that runs a clone's own source (PYTHONPATH) with this environment's packages and
    commands (`dvc`, `soarlab`), as its own project (no DVC_ROOT of a calling `dvc`)."""
    env = {**os.environ, "PYTHONPATH": str(dest / "src"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("DVC_ROOT", None)
    return env


def folder_name(rev: str) -> str:
    """`rev` as a folder name (HEAD~1, origin/main)."""
    return rev.replace("/", "_").replace("~", "-")


def error_log() -> IO[str]:
    """A temporary file for a timed command's stderr: a pipe nobody reads until the command ends would
    stop it once its output fills the pipe (a stage logging every failed request does)."""
    return tempfile.TemporaryFile("w+")


def run_timed(cmd: list[str], what: str, **popen) -> tuple[float, float]:
    """(wall s, CPU s of `cmd` and the children it reaped) of `cmd` run to its end (Popen's `popen`
    options: cwd, env), its output dropped; exits naming `what` when it failed."""
    with error_log() as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, text=True, **popen)
        return wait_timed(proc, started, what, stderr)


def wait_timed(proc: subprocess.Popen, started: float, what: str, stderr: IO[str]) -> tuple[float, float]:
    """(wall s since `started`, CPU s of `proc` and the children it reaped) once it exits; exits with the
    end of its `stderr` (an error_log), naming `what`, when it failed."""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        stderr.seek(0)
        sys.exit(f"{Path(sys.argv[0]).stem}: {what} failed: {stderr.read()[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime
