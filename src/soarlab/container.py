"""The container engine (Docker or Podman) that builds and runs the serving image.

    cli = container_tool("auto")         # docker if `docker info` answers, else podman if `podman info` does
    cli.run(["images"])                   # any subcommand, with the right environment

Podman runs rootful here without a daemon. Two settings of this machine class need a
containers.conf (written per user under ~/.cache/soarlab/, used only when CONTAINERS_CONF is unset):
- `runtime = "runc"`: crun fails on this cgroup layout, runc works;
- `default_ulimits` at or below the host's hard limits: Podman's defaults are above what root may
  raise here, so every container would fail to start.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from soarlab.errors import SoarError

CLIS = ("docker", "podman")


@dataclass
class ContainerCLI:
    name: str                       # docker | podman
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        return [self.name, *args]

    def full_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, args: list[str], timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout, env=self.full_env())
        if check and proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SoarError(f"`{self.name} {' '.join(args[:3])}` failed (exit {proc.returncode}): {last[0][:300]}",
                            "run it by hand to see why; `soarlab doctor` shows the container engine's state")
        return proc

    def image_exists(self, tag: str) -> bool:
        return self.run(["image", "inspect", tag], timeout=60).returncode == 0

    def image_id(self, tag: str) -> str:
        return self.run(["image", "inspect", "--format", "{{.Id}}", tag], timeout=60, check=True).stdout.strip()

    def image_bytes(self, tag: str) -> int:
        out = self.run(["image", "inspect", "--format", "{{.Size}}", tag], timeout=60, check=True).stdout
        return int(out.strip().splitlines()[0])

    def containers(self, name: str) -> list[str]:
        """Ids of containers (running or not) named exactly `name`."""
        out = self.run(["ps", "-a", "-q", "--filter", f"name=^{name}$"], timeout=60).stdout
        return out.split()


def hard_limit_ulimits() -> dict[str, int]:
    """nofile and nproc at the host's hard limits (nproc also capped by pid_max), read now."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text().split()[0])
    unlimited = resource.RLIM_INFINITY
    return {"nofile": nofile if nofile != unlimited else 1048576,
            "nproc": min(nproc if nproc != unlimited else pid_max, pid_max)}


def podman_conf(dest_dir: Path | None = None) -> Path:
    """A containers.conf for this machine (see the module docstring); rewritten each time, limits change."""
    dest_dir = dest_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "soarlab"
    dest_dir.mkdir(parents=True, exist_ok=True)
    limits = hard_limit_ulimits()
    lines = ["# Written by soarlab (soarlab/container.py): limits from this host, read at run time.", "[containers]",
             "default_ulimits = [" + ", ".join(f'"{k}={v}:{v}"' for k, v in limits.items()) + "]"]
    if shutil.which("runc"):
        lines += ["[engine]", 'runtime = "runc"']
    path = dest_dir / "containers.conf"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def _answers(cli: ContainerCLI) -> tuple[bool, str]:
    if shutil.which(cli.name) is None:
        return False, f"{cli.name} not installed"
    try:
        proc = cli.run(["info"], timeout=60)
    except subprocess.TimeoutExpired:
        return False, f"`{cli.name} info` timed out"
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
        return False, f"`{cli.name} info` failed" + (f" ({lines[-1].strip()[:200]})" if lines else "")
    return True, f"`{cli.name} info` answers"


def make_cli(name: str) -> ContainerCLI:
    env = {}
    if name == "podman" and not os.environ.get("CONTAINERS_CONF"):
        env["CONTAINERS_CONF"] = str(podman_conf())
    return ContainerCLI(name, env)


def probe(choice: str) -> tuple[ContainerCLI | None, str]:
    """(cli, why) for package.container_cli = auto | docker | podman; cli is None when none answers."""
    choice = str(choice).strip().lower()
    if choice not in ("auto", *CLIS):
        raise SoarError(f"package.container_cli={choice!r} is not auto, docker or podman",
                        "set package.container_cli=auto")
    reasons = []
    for name in CLIS if choice == "auto" else (choice,):
        cli = make_cli(name)
        ok, why = _answers(cli)
        if ok:
            return cli, why
        reasons.append(why)
    return None, "; ".join(reasons)


def container_tool(choice: str) -> ContainerCLI:
    """The Docker or Podman command line for package.container_cli = `choice`; an error when none answers."""
    cli, why = probe(choice)
    if cli is None:
        raise SoarError(f"no container engine answers ({why})",
                        "as root run `bash scripts/setup.sh` (installs podman, runc, mmdebstrap), or start Docker")
    return cli


def apt_sources_file() -> Path:
    """The host's apt sources (deb822 or one-line format), for mmdebstrap."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if path.is_file() and path.read_text().strip():
            return path
    found = sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) if Path("/etc/apt/sources.list.d").is_dir() else []
    if found:
        return found[0]
    raise SoarError("no apt sources file found on this machine (needed to make the Debian base image)",
                    "set package.cpu_image.apt_sources to a sources file, or import a Debian image as package.cpu_image.base")


def ensure_cpu_base(cli: ContainerCLI, tag: str, suite: str, sources: str | None, log_path: Path,
                    force: bool = False) -> bool:
    """Make the Debian base image `tag` with mmdebstrap unless it exists; True if it was made now."""
    if not force and cli.image_exists(tag):
        return False
    if shutil.which("mmdebstrap") is None:
        raise SoarError(f"base image {tag} is missing and mmdebstrap is not installed",
                        "as root: apt-get install -y mmdebstrap (scripts/setup.sh does it), or import a base image")
    src = Path(sources) if sources else apt_sources_file()
    print(f"base image: making {tag} with mmdebstrap ({suite}, sources {src}); about a minute or two")
    with open(log_path, "ab") as log:
        strap = subprocess.Popen(["mmdebstrap", "--variant=minbase", suite, "-", str(src)],
                                 stdout=subprocess.PIPE, stderr=log)
        imp = subprocess.run(cli.argv("import", "-", tag), stdin=strap.stdout, stdout=log, stderr=log,
                             env=cli.full_env())
        strap.stdout.close()
        code = strap.wait()
    if code != 0 or imp.returncode != 0:
        raise SoarError(f"making base image {tag} failed (mmdebstrap exit {code}, import exit {imp.returncode}); "
                        f"log {log_path}", f"read {log_path}")
    return True
