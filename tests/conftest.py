"""Shared fixtures. The tiny model is the shipped checkpoint, installed once per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`-n auto`: one and a half workers per core (at least 2; `--maxprocesses` caps it). The pipeline tests
    spend about a third of their time waiting (loopback servers' per-token delays, server starts, Podman),
    so a worker beyond the cores keeps them busy: on 2 cores, 3 workers ran the suite in 709 s against 731 s
    with 4 (docs/PERFORMANCE.md, "Test suite"). With PYTEST_XDIST_AUTO_NUM_WORKERS set, xdist's own hook
    reads it."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(2, len(os.sched_getaffinity(0)) * 3 // 2)


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, each worker's torch (in this process and in the stages it starts) gets its share
    of the cores, and idle OpenMP threads sleep. Torch takes every core by default, and two workers' thread
    pools on the same cores spin at their barriers waiting for a descheduled thread: two evaluate stages
    side by side took 16x as long as one alone (docs/PERFORMANCE.md, "CPU contention"). Set before any
    test imports torch; a value the developer set wins. A CPU server takes engine.cpu_threads; GPTQ keeps
    its pinned thread count (quant.cpu_numerics: its bytes depend on it), and the sleeping threads are what
    spare it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
        for name, value in (("OMP_NUM_THREADS", threads), ("MKL_NUM_THREADS", threads), ("OMP_WAIT_POLICY", "PASSIVE")):
            os.environ.setdefault(name, value)


_share_the_cores_between_workers()


def pytest_collection_modifyitems(items):
    """Files with the most whole-pipeline tests (e2e, container) first, then by their slow tests. xdist
    hands each worker a file at a time in this order (`--no-loadscope-reorder` in pyproject.toml), so the
    longest files start first and the workers finish together, instead of one worker left with a long file
    that happened to sort last (the default order is by test count, which the quick parametrized files lead)."""
    from collections import Counter

    heavy, slow = Counter(), Counter()
    for item in items:
        heavy[item.path] += bool(item.get_closest_marker("e2e") or item.get_closest_marker("container"))
        slow[item.path] += bool(item.get_closest_marker("slow"))
    items.sort(key=lambda item: (-heavy[item.path], -slow[item.path]))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The embedded tiny MiniCPM-SALA checkpoint (real tokenizer, config, remote code, bf16 weights), as fetch-model installs it."""
    from soarlab.tiny import install_tiny_model

    return install_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir, trust_remote_code=True)


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    """Port and GPU leases of this test only (the machine's others, other tests' included, are left
    alone); subprocesses inherit it."""
    from soarlab.names.environment import STATE_DIR_ENV

    folder = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


@pytest.fixture
def source_project(tmp_path, monkeypatch) -> Path:
    """A copy (the working directory) of the project's conf/, src/soarlab and pyproject.toml (what package bundles)."""
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "conf", proj / "conf")
    shutil.copytree(ROOT / "src" / "soarlab", proj / "src" / "soarlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    monkeypatch.chdir(proj)
    return proj


def make_project(dest: Path) -> tuple[Path, dict[str, str]]:
    """A git repo at `dest` holding this project's tracked and untracked-but-not-ignored files (what a
    fresh clone plus local edits would hold), and the environment to run `dvc`/`soarlab` in it."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
    }
    env.pop("DVC_ROOT", None)
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True)
    return dest, env


def make_fresh_project(dest: Path) -> tuple[Path, dict[str, str]]:
    """make_project without outputs: the committed dvc.lock names outputs made on another machine, which
    this copy's DVC cache does not hold (a user would `dvc pull` or `dvc repro` them first; `soarlab
    sweep` refuses to start on them and says so)."""
    dest, env = make_project(dest)
    subprocess.run(["git", "rm", "-q", "dvc.lock"], cwd=dest, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "no outputs yet"], cwd=dest, env=env, check=True)
    return dest, env


# For tests about something other than the bench's figures: one timed run per level and no pause after
# the cache flush (the tiny default runs 3 repeats and pauses 1 s, as the official tool does).
QUICK_BENCH_FIELDS = {"repeats": 1, "pause_after_flush_s": 0.0}
QUICK_BENCH = [f"bench.{key}={value}" for key, value in QUICK_BENCH_FIELDS.items()]  # as Hydra overrides

# A pipeline served by a loopback server (soarlab.bench.loopback, given with -S engine.url=...): the served
# answers are the loopback's, so the tiny model is neither quantized nor served (CPU time).
LOOPBACK_PIPELINE = ["-S", "quant=none", "-S", "engine=external",
                     "-S", "bench.pause_after_flush_s=0", "-S", "eval.retries=0"]


def run_in(project: tuple[Path, dict[str, str]], cmd: list[str], ok=(0,), timeout: float = 1500) -> subprocess.CompletedProcess:
    """`cmd` in a make_project project; its exit code must be one of `ok`."""
    dest, env = project
    proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    return _exit_in(proc, ok)


def soarlab_in(project: tuple[Path, dict[str, str]], args: list[str], ok=(0,)) -> subprocess.CompletedProcess:
    """`soarlab ARGS` in a make_project project, through the CLI's entry point (soarlab.cli.main) in this
    process: for tests of a command's output and exit code, which a process per call would make pay for
    MLflow's import each time (about 2 CPU s). What main() changes for its process is put back after it:
    the environment and working directory (the project's during the call), the signal handlers
    soarlab.stopping installs, and MLflow's tracking URI."""
    import contextlib
    import io
    import signal

    import mlflow

    from soarlab import stopping
    from soarlab.cli import main

    dest, env = project
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_handlers = {signum: signal.getsignal(signum) for signum in stopping.SIGNALS}
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(dest)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
    finally:
        os.chdir(saved_cwd)
        mlflow.set_tracking_uri(saved_env.get("MLFLOW_TRACKING_URI"))  # MLflow keeps it in that variable; None unsets
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
    return _exit_in(subprocess.CompletedProcess(["soarlab", *args], code, out.getvalue(), err.getvalue()), ok)


def _exit_in(proc: subprocess.CompletedProcess, ok) -> subprocess.CompletedProcess:
    assert proc.returncode in ok, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc
