"""Run a server command in its own process group, log it, wait for health, always stop it.

A server dies with the run that started it, however that run ends. A clean exit, an error, Ctrl-C
or SIGTERM/SIGHUP (turned into an exception by the CLI) stop it in `managed_server`'s `finally`.
SIGKILL runs no code: for it the kernel kills the server itself (PR_SET_PDEATHSIG), and whatever
still survives (other processes of the server's group) is found through the port lease
(soarlab.engines.port_lease) and stopped on the next start.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from soarlab.engines.port_lease import PortLease, lease_port, stop_group
from soarlab.engines.server import is_healthy
from soarlab.errors import SoarError
from soarlab.parent_death import set_parent_death_signal

_spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="soarlab-spawner")


def log_tail(log_path: Path, lines: int = 15) -> str:
    try:
        with open(log_path, errors="replace") as fh:
            tail = [line.rstrip() for line in deque(fh, maxlen=lines)]
    except OSError:
        return "(no log)"
    tail = [line for line in tail if line]
    return " | ".join(tail)[-2000:] if tail else "(log is empty)"


@contextlib.contextmanager
def port_lease(host: str, port: int) -> Iterator[PortLease]:
    """Hold a lease on `port` (or on a free port when it is taken; see lease_port) for the block."""
    lease = lease_port(host, port)
    try:
        yield lease
    finally:
        lease.release()


def _die_with(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:  # in the child between fork and exec; the setting survives exec
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before the line above: no signal would come
            os._exit(1)
    return preexec


def spawn(cmd: Sequence[str], **popen_kwargs) -> subprocess.Popen:
    """Popen in a new session, its leader SIGKILLed by the kernel when this process dies.

    The parent-death signal fires when the *thread* that forked exits, not the process: a server
    forked from a short-lived worker thread would be killed when that thread ends. So only the
    main thread forks directly; other threads fork through one spawner thread that lives as long
    as the process.
    """
    def start() -> subprocess.Popen:
        return subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=_die_with(os.getpid()), **popen_kwargs)

    if threading.current_thread() is threading.main_thread():
        return start()
    return _spawner.submit(start).result()


def stop_process(proc: subprocess.Popen, grace_s: float, extra_stop: Callable[[], None] | None = None) -> None:
    """SIGTERM the whole process group, wait up to `grace_s` for all of it to exit, then SIGKILL it."""
    if extra_stop is not None:
        with contextlib.suppress(Exception):
            extra_stop()
    stop_group(proc.pid, grace_s, reap=proc.poll)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@contextlib.contextmanager
def managed_server(
    cmd: Sequence[str],
    *,
    base_url: str,
    log_path: Path,
    startup_timeout_s: float,
    stop_grace_s: float = 15.0,
    env: Mapping[str, str] | None = None,
    name: str = "server",
    extra_stop: Callable[[], None] | None = None,
    poll_interval_s: float = 0.5,
    lease: PortLease | None = None,
    container: list[str] | None = None,
) -> Iterator[subprocess.Popen]:
    """Start `cmd` (own session, output to `log_path`), yield once `base_url` is healthy, stop on exit.

    `lease`: the held lease of the server's port, where the server is recorded while it runs
    (`container`: [container CLI, name] of its container, if any), so that a later run can find it.
    Raises SoarError naming the log and its last lines if the process exits or is not healthy
    within `startup_timeout_s`.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {})}
    with open(log_path, "wb") as log:
        log.write(f"$ {shlex.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env)
        except FileNotFoundError:
            raise SoarError(f"cannot start {name}: {cmd[0]!r} not found", "install it, or run `soarlab doctor`") from None
    try:
        if lease is not None:
            lease.write(proc.pid, list(cmd), log_path, container=container)
        deadline = time.monotonic() + startup_timeout_s
        while True:
            code = proc.poll()
            if code is not None:
                raise SoarError(
                    f"{name} exited with code {code} during startup; log {log_path}: {log_tail(log_path)}",
                    f"read {log_path}; `soarlab doctor` shows what this machine can run",
                )
            if is_healthy(base_url, timeout=2.0):
                break
            if time.monotonic() > deadline:
                raise SoarError(
                    f"{name} not healthy at {base_url} after {startup_timeout_s:g}s; log {log_path}: {log_tail(log_path)}",
                    f"read {log_path}; if it is only slow, raise engine.startup_timeout_s",
                )
            time.sleep(poll_interval_s)
        yield proc
    finally:
        stop_process(proc, stop_grace_s, extra_stop)
