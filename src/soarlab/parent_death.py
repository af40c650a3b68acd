"""Stop when the process that started us dies, even by SIGKILL (Linux; elsewhere these do nothing).

The kernel's parent-death signal (PR_SET_PDEATHSIG) covers a direct parent. A stage DVC runs has
DVC as its parent only when the shell DVC starts it with (`$SHELL -c CMD`) replaces itself by the
command, as bash does; dash (Debian's /bin/sh, DVC's shell when SHELL is unset) and others wait for
it instead, and a shell whose parent dies passes nothing on. So for a stage under such a shell, a
thread waits on DVC's process itself (a pidfd) and sends us SIGTERM when it exits.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import threading
from pathlib import Path

from soarlab.names.environment import DVC_STAGE_ENV

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Looked up before any fork, so that a child between fork and exec only calls it; None off Linux.
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def set_parent_death_signal(sig: int) -> None:
    """Have the kernel send `sig` to this process when the thread that forked it exits."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(sig))


def proc_stat(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat from field 3 on (after the command name, which may hold spaces); None if no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _parent_pid(pid: int) -> int | None:
    fields = proc_stat(pid)
    return int(fields[1]) if fields else None


def _runs_stage(pid: int, stage: str) -> bool:
    """Whether `pid` was started for this DVC stage (a shell between DVC and us), not DVC itself."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{DVC_STAGE_ENV}={stage}".encode() in environ


def _terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the CLI turns it into an exception: `finally` blocks stop servers


def _terminate_when_exits(pidfd: int) -> None:
    select.select([pidfd], [], [])  # a pidfd becomes readable when its process exits
    _terminate_self()


def stop_with_dvc() -> None:
    """Under DVC (DVC_STAGE set): receive SIGTERM when DVC dies, however it dies, so that the stage stops
    its server and writes no outputs that dvc.lock will never record. Call it in the main thread, after
    the CLI's SIGTERM handler is installed."""
    stage = os.environ.get(DVC_STAGE_ENV)
    if not stage or _prctl is None:
        return
    parent = os.getppid()
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above: no signal would come
        _terminate_self()
        return
    shell = parent  # the outermost process between DVC and us, if any
    while _runs_stage(shell, stage) and _runs_stage(_parent_pid(shell) or 0, stage):
        shell = _parent_pid(shell)
    if not _runs_stage(shell, stage):
        return  # DVC is the parent: the parent-death signal covers it
    dvc = _parent_pid(shell)
    if dvc is None or dvc <= 1:  # DVC is gone already (the shell was handed to init)
        _terminate_self()
        return
    if not hasattr(os, "pidfd_open"):
        return
    try:
        pidfd = os.pidfd_open(dvc)
    except ProcessLookupError:
        pidfd = None
    except OSError:  # no pidfds here (Linux < 5.3): this case stays uncovered
        return
    if pidfd is None or _parent_pid(shell) != dvc:  # DVC gone, or gone before the pidfd (its pid then reused)
        _terminate_self()
        return
    threading.Thread(target=_terminate_when_exits, args=(pidfd,), name="soarlab-dvc-watch", daemon=True).start()
