"""Port leases: which of our servers holds which port, so that a run killed outright never blocks the next one.

A run that starts a server holds an exclusive lock on `<state dir>/ports/<port>.lock` for as long as
the server lives, and records the server beside it in `<port>.json` (pid, process group, start time,
command, log, the run's pid). The kernel drops the lock when the run dies, however it dies (SIGKILL
included), so on the next start:

- lock held by a live run: that port is another run's; this run takes a free port and says so;
- lock free but the recorded server still alive: a stale server of ours, stopped and reported,
  never reused;
- port answered by a process we did not start: a free port, and the message says who holds it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from soarlab.engines.server import free_port, port_in_use
from soarlab.parent_death import proc_stat
from soarlab.paths import state_dir


def _ports_dir() -> Path:
    folder = state_dir() / "ports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if no such process runs (a
    zombie has exited). A pid plus its start time names one process, even after the pid is reused."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields and fields[0] != "Z" else None


def group_members(pgid: int, started_since: int = 0) -> list[int]:
    """Live processes of process group `pgid` started at or after `started_since` (a recycled id's are older)."""
    members = []
    for proc in Path("/proc").glob("[0-9]*"):
        fields = proc_stat(proc.name)
        if fields and int(fields[2]) == pgid and fields[0] != "Z" and int(fields[19]) >= started_since:
            members.append(int(proc.name))
    return members


@dataclass
class ServerRecord:
    """A server we started, as written in its lease."""

    port: int
    pid: int
    pgid: int
    start_time: int | None
    owner_pid: int
    cmd: list[str]
    log: str
    started: str
    container: list[str] | None = None  # [cli, name] (engine.launcher=container): stopping the client does not stop it

    def alive(self) -> bool:
        """The server, or any process of its group (the workers of a multi-process server), still runs."""
        if self.start_time is None:
            return False
        return process_start_time(self.pid) == self.start_time or bool(group_members(self.pgid, self.start_time))

    def describe(self) -> str:
        return (f"pid {self.pid} on port {self.port}, started {self.started} by pid {self.owner_pid} "
                f"(now gone), log {self.log}")


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the process group; False once the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):  # gone (PermissionError: a recycled id we do not own)
        return False


def stop_group(pgid: int, grace_s: float, reap=lambda: None) -> None:
    """SIGTERM the process group, SIGKILL it if any of it is left after `grace_s`.
    `reap` collects our own exited leader, so that a zombie does not count as alive."""
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not signal_group(pgid, 0):
            return
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)
    for _ in range(100):  # SIGKILL is not instant: wait (5 s at most) until the group, and its sockets, are gone
        reap()
        if not signal_group(pgid, 0):
            return
        time.sleep(0.05)


def stop_stale(record: ServerRecord, grace_s: float = 10.0) -> bool:
    """Stop a server whose run is gone; True if there was something to stop."""
    stopped = False
    if record.container and shutil.which(record.container[0]):
        from soarlab.container import make_cli

        cli_name, name = record.container
        stopped = make_cli(cli_name).run(["stop", "-t", str(int(grace_s)), name], timeout=grace_s + 30).returncode == 0
    if record.alive():
        stop_group(record.pgid, grace_s)
        stopped = True
    return stopped


class PortLease:
    """The lock and record of one port. `acquire()` is non-blocking."""

    def __init__(self, port: int):
        self.port = port
        folder = _ports_dir()
        self.record_path = folder / f"{port}.json"
        self._lock = FileLock(folder / f"{port}.lock")

    def acquire(self) -> bool:
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            return False
        return True

    def release(self, forget: bool = True) -> None:
        if forget:
            self.record_path.unlink(missing_ok=True)
        self._lock.release()

    def read(self) -> ServerRecord | None:
        try:
            return ServerRecord(**json.loads(self.record_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def write(self, pid: int, cmd: list[str], log: str | Path, container: list[str] | None = None) -> None:
        record = ServerRecord(
            port=self.port, pid=pid, pgid=pid, start_time=process_start_time(pid), owner_pid=os.getpid(),
            cmd=list(cmd), log=str(log), started=dt.datetime.now().isoformat(timespec="seconds"), container=container,
        )
        tmp = self.record_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, self.record_path)


# A command line only SOAR Lab launches (engines/transformers_engine.py). `sglang.launch_server` is not
# one: a user's own detached SGLang server looks the same, and is theirs to stop; ours are leased.
SERVER_MARKERS = ("soarlab.engines.transformers_serve",)


def orphan_servers() -> list[tuple[int, str]]:
    """(pid, command line) of SOAR Lab servers whose run is gone with no lease to tell (left by a
    version before leases, or a lease folder removed): reparented to init (parent pid 1)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        fields = proc_stat(proc.name)
        if not fields or fields[0] == "Z" or int(fields[1]) != 1:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if any(marker in cmdline for marker in SERVER_MARKERS):
            found.append((int(proc.name), cmdline))
    return sorted(found)


def _stop_orphans_on(port: int) -> None:
    """Stop what listens on `port` if all of it is orphaned SOAR Lab servers; report each."""
    listeners = listener_pids(port)
    orphans = dict(orphan_servers())
    if listeners and all(pid in orphans for pid in listeners):
        for pid in listeners:
            with contextlib.suppress(OSError):  # it may have gone meanwhile
                stop_group(os.getpgid(pid), 10.0)
            _say(f"stopped an orphaned SOAR Lab server on port {port}: pid {pid} ({orphans[pid][:160]})")


def _say(message: str) -> None:
    print(f"soarlab: {message}", file=sys.stderr, flush=True)


def _take(port: int, host: str) -> PortLease | None:
    """The lease on `port` if no live run holds it, after stopping a stale server of ours there;
    None if another run holds it or a process we did not start listens there."""
    lease = PortLease(port)
    if not lease.acquire():
        return None
    record = lease.read()
    if record is not None and stop_stale(record):
        _say(f"stopped a stale server left by an earlier run: {record.describe()}")
    lease.record_path.unlink(missing_ok=True)
    if port_in_use(host, port):
        _stop_orphans_on(port)
    if port_in_use(host, port):
        lease.release()
        return None
    return lease


def lease_port(host: str, port: int) -> PortLease:
    """A held lease on `port` (0: any free port); a free port instead, said on stderr, when `port` is taken."""
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    remove_stale_leases()
    if port:
        lease = _take(port, probe_host)
        if lease is not None:
            return lease
    for _ in range(20):  # a port picked by the kernel can be taken again before we lock it: retry
        lease = _take(free_port(probe_host), probe_host)
        if lease is not None:
            if port:
                holder = listener_pids(port)
                who = f"pid {', '.join(map(str, holder))}" if holder else "another run or process"
                _say(f"port {port} is taken ({who}); this run serves on free port {lease.port} "
                     f"(set engine.port to choose one, engine.port=0 for any)")
            return lease
    from soarlab.errors import SoarError

    raise SoarError(f"no free port found on {host} after 20 tries", "set engine.port to a port you know is free")


def _records_of_gone_runs() -> list[tuple[Path, ServerRecord | None]]:
    """(record file, its record or None if unreadable) of each lease whose run is gone (its lock is free)."""
    found = []
    for path in sorted(_ports_dir().glob("*.json")):
        lease = PortLease(int(path.stem)) if path.stem.isdigit() else None
        if lease is None or not lease.acquire():
            continue
        try:
            found.append((path, lease.read()))
        finally:
            lease.release(forget=False)
    return found


def stale_servers() -> list[ServerRecord]:
    """Servers of ours whose run is gone (lease lock free) but which still run."""
    return [record for _, record in _records_of_gone_runs() if record is not None and record.alive()]


def stale_leases() -> list[Path]:
    """Lease records of runs that are gone and whose server is gone too: nothing to stop, only files."""
    return [path for path, record in _records_of_gone_runs() if record is None or not record.alive()]


def remove_stale_leases() -> None:
    """Each start removes the records stale_leases lists (their lock files stay: another run may hold one)."""
    for path in stale_leases():
        path.unlink(missing_ok=True)


def listener_pids(port: int) -> list[int]:
    """Pids of processes listening on TCP `port` (any address), as far as /proc lets us see."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(os.readlink(fd).removeprefix("socket:[").rstrip("]") in inodes for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            continue
    return sorted(pids)
