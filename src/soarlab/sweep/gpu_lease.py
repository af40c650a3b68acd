"""What a trial holds while it runs: a GPU lease (or none on a CPU machine), its own temp folder and
JIT-cache folders, and one-at-a-time locks shared by trials of one project.

A trial takes the first free GPU among those it may see, by trying a machine-wide file lock per
GPU, and waits when all are taken. Trials take unequal time, so a GPU is never picked by job
number: a lock is released only when its trial ends. Under Ray or SLURM the scheduler has already
set CUDA_VISIBLE_DEVICES, and the lease is taken among those GPUs only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from soarlab.engines.sglang import JIT_CACHE_VARS  # one folder per GPU slot, reused by its next trial
from soarlab.names.environment import CUDA_DEVICES_ENV, STATE_DIR_ENV
from soarlab.paths import state_dir


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when a scheduler set it, else nvidia-smi's."""
    assigned = os.environ.get(CUDA_DEVICES_ENV)
    if assigned is not None:
        return [gpu for gpu in assigned.split(",") if gpu.strip() and gpu.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def parallel_trials() -> int:
    """How many trials the local launcher runs at once: one per GPU, one on a machine without."""
    return max(1, len(visible_gpus()))


def try_lock(path: Path, blocking: bool = True):
    """An open file holding an exclusive flock on `path` (closing it unlocks), or None when taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        fh.close()
        return None
    return fh


@dataclass
class Lease:
    gpu: str | None                       # None: no GPU on this machine
    env: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def gpu_lease(cache_root: Path, poll_s: float = 2.0) -> Iterator[Lease]:
    """Hold one GPU (CUDA_VISIBLE_DEVICES set to it) plus a fresh temp folder and per-GPU JIT caches."""
    gpus = visible_gpus()
    with contextlib.ExitStack() as stack:
        gpu = None
        while gpus and gpu is None:
            for candidate in gpus:
                # machine-wide, beside the port leases: two projects on one machine must not share a GPU either
                held = try_lock(state_dir() / "gpu-leases" / f"gpu-{candidate}.lock", blocking=False)
                if held is not None:
                    stack.enter_context(held)
                    gpu = candidate
                    break
            else:
                time.sleep(poll_s)  # every GPU is taken: wait for a trial to end
        slot = f"gpu-{gpu}" if gpu is not None else "cpu"
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"soarlab-trial-{slot}-"))
        # the machine's state folder, resolved here: under the trial's TMPDIR its servers' port leases
        # would be the trial's alone, and two trials could take one port
        env = {"TMPDIR": tmp, STATE_DIR_ENV: str(state_dir())}
        env.update({var: str(cache_root / slot / sub) for var, sub in JIT_CACHE_VARS.items()})
        if gpu is not None:
            env[CUDA_DEVICES_ENV] = gpu
        yield Lease(gpu, env)
