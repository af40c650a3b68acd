"""A DVC experiment run in its own temporary workspace (`dvc exp run --temp`): started, watched to its end or
its timeout, stopped with its stages' servers when interrupted, its failure said in one line, and its
committed files read back. A sweep trial (soarlab.sweep.trial) and `compare --rerun` (soarlab.decide.rerun)
each run their experiments through it. Also where the project's DVC cache is, which a sweep reads."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from soarlab.engines.process import stop_process
from soarlab.names.environment import DVC_NO_ANALYTICS_ENV
from soarlab.parent_death import set_parent_death_signal

_EVALUATE_STAGE = "'evaluate'"  # how DVC's output names the first stage that needs the quantized model
_POLL_S = 2.0  # how often a running experiment's log and pruning decisions are looked at
_OOM_SIGNS = ("out of memory", "OutOfMemoryError", "MemoryError", "exited with -9", "Killed")


def failure_reason(log_text: str, returncode: int) -> str:
    """Why `dvc exp run` failed, in one line: the stage's own error, else DVC's last ERROR line; out of memory
    said first."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    ours = [line.split("soarlab: error:", 1)[1].strip() for line in lines if "soarlab: error:" in line]
    reason = ours[-1] if ours else next((line for line in reversed(lines) if line.startswith("ERROR")), "")
    reason = reason or f"dvc exp run exited with {returncode}"
    if any(sign in log_text for sign in _OOM_SIGNS):
        reason = f"out of memory: {reason}"
    return reason


# Who DVC commits an experiment as where git knows no user (a fresh machine): a user's own identity wins.
FALLBACK_GIT_IDENTITY = {"NAME": "SOAR Lab", "EMAIL": "soarlab@localhost"}


def git_identity_env(root: Path, env: dict) -> dict:
    """GIT_AUTHOR_* and GIT_COMMITTER_* (which DVC honours) where git has no user.name or user.email
    configured: without them every `dvc exp run` fails with "Git user name and email must be configured"."""
    def configured(key: str) -> bool:
        return subprocess.run(["git", "config", key], cwd=root, env=env, capture_output=True).returncode == 0

    if configured("user.name") and configured("user.email"):
        return {}
    return {f"GIT_{who}_{field}": value for who in ("AUTHOR", "COMMITTER")
            for field, value in FALLBACK_GIT_IDENTITY.items() if f"GIT_{who}_{field}" not in env}


def dvc_cache_dir(root: Path, env: dict | None = None) -> Path:
    """The project's DVC cache folder as `dvc cache dir` says it (a cache shared by a team included). DVC's
    usage report is off for the call: offline, DVC would leave it behind in a temporary file."""
    env = {**(os.environ if env is None else env), DVC_NO_ANALYTICS_ENV: "1"}
    said = subprocess.run(["dvc", "cache", "dir"], cwd=root, env=env, capture_output=True, text=True).stdout.strip()
    return Path(said) if said else root / ".dvc" / "cache"


def run_experiment(root: Path, name: str, overrides: Sequence[str], env: dict, timeout_s: float, log,
                    on_quantized: Callable[[], None], pull: bool, on_poll: Callable[[], None] | None = None) -> int | None:
    """`dvc exp run --temp` (`--pull`: take stages' outputs made elsewhere from the DVC remote); None
    when it ran past `timeout_s`. Interrupted: stop it, then re-raise. `on_quantized` is called
    once DVC reaches the evaluate stage, which needs the quantized model; `on_poll` at every poll
    (a pruning sweep's decisions)."""
    cmd = ["dvc", "--wait-for-lock", "exp", "run", "--temp", *(["--pull"] if pull else []), "--name", name,
           *[a for o in overrides for a in ("-S", o)]]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    start = log.tell()
    env = {**env, **git_identity_env(root, env)}
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_interrupt_when_orphaned)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return proc.wait(timeout=_POLL_S)  # returns as the experiment ends, not at the next poll
            if time.monotonic() > deadline:
                _interrupt(proc)
                return None
            if _EVALUATE_STAGE in Path(log.name).read_text(errors="replace")[start:]:
                on_quantized()
            if on_poll is not None:
                on_poll()
    except BaseException:
        _interrupt(proc)
        raise


def _interrupt_when_orphaned() -> None:
    """In the child: SIGINT when this trial's process dies (even by SIGKILL), so DVC stops its stage."""
    set_parent_death_signal(signal.SIGINT)


def _interrupt(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGINT first, so stages stop their servers on the way out; then SIGTERM/SIGKILL the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        stop_process(proc, grace_s=15)


def experiment_file(root: Path, name: str, path: str) -> str | None:
    """A file as committed in experiment `name` (None when DVC saved no such file)."""
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps/"], cwd=root,
                          capture_output=True, text=True, check=True).stdout.split()
    ref = next((r for r in refs if r.endswith(f"/{name}")), None)
    shown = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=root, capture_output=True, text=True)
    return shown.stdout if ref and shown.returncode == 0 else None


def experiment_score(root: Path, name: str, score_path: str) -> dict | None:
    """reports/score.json as committed in experiment `name` (None when DVC saved no such file)."""
    text = experiment_file(root, name, score_path)
    return json.loads(text) if text is not None else None
