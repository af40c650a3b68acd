"""What earlier runs left behind, for `soarlab doctor`: stale servers of ours, half-written outputs,
a process on the configured port. One row each, (name, ok, detail), the detail ending in the fix."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from soarlab.atomic import project_temp_outputs
from soarlab.engines.port_lease import PortLease, listener_pids, orphan_servers, stale_leases, stale_servers
from soarlab.engines.server import port_in_use
from soarlab.errors import SoarError
from soarlab.schema import ExternalEngine, SoarConfig

Row = tuple[str, bool, str]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def _project_params() -> tuple[Path | None, SoarConfig | None]:
    """The project's params.yaml around the current folder; None outside a project or for a params.yaml
    the schema refuses (every stage then says why, in one line)."""
    from soarlab.config import load_params
    from soarlab.paths import project_root

    try:
        root = project_root()
    except SoarError:
        return None, None
    try:
        return root, load_params(root / "params.yaml")
    except SoarError:
        return root, None


def server_rows() -> list[Row]:
    rows = [("stale server", False, f"{r.describe()}. Fix: kill -TERM -{r.pgid}") for r in stale_servers()]
    rows += [("stale server", False, f"pid {pid}, orphaned (parent 1): {cmd[:160]}. Fix: kill -TERM -{_pgid(pid)}")
             for pid, cmd in orphan_servers()]
    rows = rows or [("stale servers", True, "none of ours outlived its run")]
    leases = stale_leases()
    if leases:
        rows.append(("stale leases", False, f"port records of ended runs: {len(leases)}, in {leases[0].parent}. "
                                            "Fix: none needed, the next server start removes them"))
    return rows


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return pid


def temp_output_rows(root: Path | None, cfg: SoarConfig | None) -> list[Row]:
    found = project_temp_outputs(root, cfg.paths) if root is not None and cfg is not None else []
    found += sorted(Path(tempfile.gettempdir()).glob("gptqmodel-logs-*"))  # left by SOAR Lab before 2026-12
    if not found:
        return [("temp outputs", True, "no half-written outputs left by killed runs")]
    return [("temp output", False, f"left by a killed run. Fix: rm -rf {shlex.quote(str(path))}") for path in found]


def port_rows(cfg: SoarConfig | None) -> list[Row]:
    if cfg is None or isinstance(cfg.engine, ExternalEngine):  # external: not ours to serve
        return []
    port = cfg.engine.port
    if not port or not port_in_use("127.0.0.1", port):
        return [(f"port {port}", True, "engine.port is free")] if port else []
    lease = PortLease(port)
    if not lease.acquire():
        return [(f"port {port}", True, "in use by a running soarlab run; others take a free port meanwhile")]
    lease.release(forget=False)
    pids = listener_pids(port)
    who = "; ".join(f"pid {pid}: {_cmdline(pid)}" for pid in pids) or "a process this user cannot see"
    kill = f"kill {' '.join(map(str, pids))}, or " if pids else ""
    return [(f"port {port}", False, f"engine.port {port} is taken by {who}; runs serve on a free port instead. "
                                    f"Fix: {kill}set engine.port to a free port (engine.port=0: any)")]


def collect() -> list[Row]:
    root, cfg = _project_params()
    return server_rows() + temp_output_rows(root, cfg) + port_rows(cfg)
