"""engine.launcher=container: the engine inside the serving image that `package` builds.

The container replays the platform's flow (RULES.md 4; see package/container-entrypoint.sh): the
submission tarball is unpacked, prepare_env.sh sourced, prepare_model.sh quantizes the *original*
model (paths.base_model, mounted read-only at package.platform_model_dir), then the server starts
with the engine's flags. bench and accuracy talk to it as to a local server. The container shares
the host's network and its server binds engine.host:engine.port; after health that is checked
against the sockets its processes listen on. The container is stopped (and checked gone) on exit.
"""

from __future__ import annotations

import contextlib
import ipaddress
from pathlib import Path
from typing import Iterator

from soarlab.container import ContainerCLI, container_tool
from soarlab.engines.common import base_url
from soarlab.engines.process import managed_server, port_lease
from soarlab.engines.server import Server
from soarlab.engines.sglang import jit_container_args, served_model_name
from soarlab.errors import SoarError
from soarlab.schema import SoarConfig, TransformersEngine


def _addr(hex_addr: str) -> tuple[str, int]:
    """'0100007F:7530' (from /proc/net/tcp, host byte order per 32-bit word) -> ('127.0.0.1', 30000)."""
    ip_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(ip_hex)
    ip = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    addr = ipaddress.ip_address(ip)
    if addr.version == 6 and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return str(addr), int(port_hex, 16)


def listening(fd_targets: list[str], tcp_tables: str) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket that processes listen on, from their descriptors' link targets
    (`socket:[INODE]`) and the text of their network namespace's /proc/net/tcp and tcp6."""
    inodes = {target[8:-1] for target in fd_targets if target.startswith("socket:[")}
    found = set()
    for line in tcp_tables.splitlines():
        cols = line.split()
        if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN (the headers have no inode)
            found.add(_addr(cols[1]))
    return found


# Run inside the container: its pid namespace holds only its own processes, so this works wherever the
# engine runs it, also where the engine cannot map them to host pids (Podman inside a container).
_SOCKETS_SCRIPT = "for f in /proc/[0-9]*/fd/*; do readlink \"$f\"; done 2>/dev/null; echo '#tables'; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"


def check_binds(cli: ContainerCLI, name: str, host: str, port: int) -> None:
    """The server listens on host:port and nowhere else."""
    out = cli.run(["exec", name, "sh", "-c", _SOCKETS_SCRIPT], timeout=60).stdout
    targets, _, tables = out.partition("#tables\n")
    socks = listening(targets.splitlines(), tables)
    told = {(str(ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)), port)}
    if socks != told:
        raise SoarError(f"the container's processes listen on {sorted(socks) or 'nothing'}, not only on {host}:{port}",
                        "the server must bind only SOARLAB_HOST:SOARLAB_PORT (see container-entrypoint.sh)")


def container_name(engine: str, port: int) -> str:
    return f"soarlab-{engine}-{port}"


def thread_args(cfg: SoarConfig) -> list[str]:
    """The server's thread count (engine.cpu_threads) as `run -e` options."""
    if not isinstance(cfg.engine, TransformersEngine):
        return []
    from soarlab.engines.transformers_engine import thread_env

    return [arg for name, value in thread_env(cfg).items() for arg in ("-e", f"{name}={value}")]


def serve_flags(cfg: SoarConfig) -> list[str]:
    """Extra server flags after the entrypoint's engine word. SGLang's come from prepare_env.sh."""
    if isinstance(cfg.engine, TransformersEngine):
        from soarlab.engines.transformers_engine import serve_flags as transformers_flags

        return transformers_flags(cfg)
    return []


@contextlib.contextmanager
def open_container(cfg: SoarConfig, log_path: Path) -> Iterator[Server]:
    from soarlab.package.image import image_spec

    spec = image_spec(cfg)
    if spec is None:
        raise SoarError(f"engine={cfg.engine.name} has no serving image", "use engine=transformers or engine=sglang")
    base = Path(cfg.paths.base_model).resolve()
    if not (base / "config.json").is_file():
        raise SoarError(f"{base} has no config.json (the original model the container quantizes)",
                        "run the fetch-model stage first (dvc repro fetch-model)")
    cli = container_tool(cfg.package.container_cli)
    if not cli.image_exists(spec.tag):
        raise SoarError(f"serving image {spec.tag} is not built",
                        "run the package stage with this engine (dvc repro package, engine.launcher=container)")
    ep = cfg.engine
    with port_lease(ep.host, ep.port) as lease:
        name = container_name(spec.engine, lease.port)
        if cli.containers(name):  # left by a killed run on this port: ours by name
            cli.run(["rm", "-f", name], timeout=120)
        gpu = ["--gpus", cfg.engine.container_gpus, "--shm-size", cfg.engine.container_shm_size,
               *jit_container_args(cfg)] if spec.gpu else []
        argv = cli.argv(
            "run", "--rm", "--init", "--name", name, "--network", "host",
            "-v", f"{base}:{cfg.package.platform_model_dir}:ro",
            "-e", f"SOARLAB_HOST={ep.host}", "-e", f"SOARLAB_PORT={lease.port}", "-e", f"SOARLAB_MODEL_GROUP={cfg.model.name}",
            *thread_args(cfg), *gpu, *cfg.engine.container_args, spec.tag, spec.engine, *serve_flags(cfg),
        )

        def stop() -> None:
            cli.run(["stop", "-t", str(int(ep.stop_grace_s)), name], timeout=ep.stop_grace_s + 60)

        url = base_url(ep, lease.port)
        try:
            with managed_server(argv, base_url=url, log_path=log_path, startup_timeout_s=ep.startup_timeout_s,
                                stop_grace_s=ep.stop_grace_s, env=cli.env, name=f"container {name}", extra_stop=stop,
                                lease=lease, container=[cli.name, name]) as proc:
                check_binds(cli, name, ep.host, lease.port)
                yield Server(base_url=url, api="sglang" if spec.engine == "sglang" else "openai",
                             model=served_model_name(cfg, cfg.package.processed_model_dir) if spec.gpu
                             else cfg.package.processed_model_dir, supports_ignore_eos=spec.engine == "sglang",
                             has_flush_cache=spec.engine == "sglang", log_path=Path(log_path), process=proc)
        finally:
            left = cli.containers(name)
            if left:
                cli.run(["rm", "-f", name], timeout=120)
                raise SoarError(f"container {name} was still there after stopping; removed it",
                                f"read {log_path}; report this if it repeats")
