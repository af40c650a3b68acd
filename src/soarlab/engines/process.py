"""Run a server command in its own process group, log it, wait for health, always stop it."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from soarlab.engines.server import is_healthy, port_in_use
from soarlab.errors import SoarError


def log_tail(log_path: Path, lines: int = 15) -> str:
    try:
        with open(log_path, errors="replace") as fh:
            tail = [line.rstrip() for line in deque(fh, maxlen=lines)]
    except OSError:
        return "(no log)"
    tail = [line for line in tail if line]
    return " | ".join(tail)[-2000:] if tail else "(log is empty)"


def check_port_free(host: str, port: int) -> None:
    if port_in_use(host, port):
        raise SoarError(
            f"port {port} on {host} is already in use (another server is running there)",
            "stop that server, pick another port (engine.port=31000), or use it as is with engine=external",
        )


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the process group; False once the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a recycled id we do not own: ours is gone
        return False


def _stop(proc: subprocess.Popen, grace_s: float, extra_stop: Callable[[], None] | None) -> None:
    """SIGTERM the whole process group, wait up to `grace_s` for all of it to exit, then SIGKILL it."""
    if extra_stop is not None:
        with contextlib.suppress(Exception):
            extra_stop()
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so that a zombie does not count as alive
        if not _signal_group(proc.pid, 0):
            break
        time.sleep(0.1)
    else:
        _signal_group(proc.pid, signal.SIGKILL)
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
) -> Iterator[subprocess.Popen]:
    """Start `cmd` (own session, output to `log_path`), yield once `base_url` is healthy, stop on exit.

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
            proc = subprocess.Popen(
                list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=full_env,
            )
        except FileNotFoundError:
            raise SoarError(f"cannot start {name}: {cmd[0]!r} not found", "install it, or run `soarlab doctor`") from None
    try:
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
        _stop(proc, stop_grace_s, extra_stop)
