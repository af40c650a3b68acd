"""The serving image: which one the engine needs, its Dockerfile, and its build.

engine=sglang -> the GPU image, FROM the platform's image (package.base_image);
engine=transformers -> the CPU image, FROM a local Debian base (package.cpu_image.base).

Builds reach the package index through this machine's settings, without leaving them in the image:
the CA bundle is a build secret (a TLS-intercepting proxy may sit between here and the index), the
index URL a build argument only where one is set, and a local wheel directory holding the CPU torch
a read-only build context.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from soarlab.container import ContainerCLI, ensure_cpu_base
from soarlab.engines.process import log_tail
from soarlab.errors import SoarError
from soarlab.package import render
from soarlab.schema import SGLangEngine, SoarConfig, TransformersEngine


@dataclass
class ImageSpec:
    engine: str          # the entrypoint's engine word: sglang | transformers
    dockerfile: str      # Dockerfile | Dockerfile.cpu
    base: str
    tag: str
    gpu: bool


def image_spec(cfg: SoarConfig) -> ImageSpec | None:
    """The image the engine is served from; None for engines without one (external)."""
    pkg = cfg.package
    if isinstance(cfg.engine, SGLangEngine):
        return ImageSpec("sglang", "Dockerfile", pkg.base_image, pkg.image_tag, gpu=True)
    if isinstance(cfg.engine, TransformersEngine):
        return ImageSpec("transformers", "Dockerfile.cpu", pkg.cpu_image.base, pkg.cpu_image.tag, gpu=False)
    return None


def pinned(names, root: Path) -> list[str]:
    """pyproject.toml's requirement for each name (one place for versions)."""
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    by_name = {canonicalize_name(Requirement(d).name): d for d in deps}
    missing = [n for n in names if canonicalize_name(n) not in by_name]
    if missing:
        raise SoarError(f"package.cpu_image.engine_packages names {missing[0]!r}, not a dependency in pyproject.toml",
                        "list only packages pyproject.toml pins (e.g. transformers)")
    return [by_name[canonicalize_name(n)] for n in names]


def write_dockerfiles(cfg: SoarConfig, dest: Path, root: Path) -> None:
    pkg = cfg.package
    common = {"MODEL_INPUT": pkg.platform_model_dir, "MODEL_OUTPUT": pkg.processed_model_dir}
    (dest / "Dockerfile").write_text(render("Dockerfile", {**common, "BASE_IMAGE": pkg.base_image,
                                                           "IMAGE_TAG": pkg.image_tag}))
    engine = " ".join(f"'{r}'" for r in pinned(pkg.cpu_image.engine_packages, root))
    (dest / "Dockerfile.cpu").write_text(render("Dockerfile.cpu", {
        **common, "BASE_IMAGE": pkg.cpu_image.base, "IMAGE_TAG": pkg.cpu_image.tag,
        "TORCH": f"'{pkg.cpu_image.torch}'", "UV": f"'{pkg.cpu_image.uv}'", "ENGINE_PACKAGES": engine,
    }))
    (dest / ".dockerignore").write_text("submission/\n*.log\nmetrics.json\nsummary.json\n")


def pip_settings() -> dict[str, str]:
    """This machine's pip settings (config files and PIP_* variables), as `pip config list` shows them."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    settings = {}
    for line in out.splitlines():
        match = re.match(r"^[^.]*\.([\w-]+)='(.*)'$", line.strip())
        if match:
            settings[match.group(1)] = match.group(2)
    return settings


def wheel_dir_with(requirement: str, find_links: str) -> Path | None:
    """The first local find-links directory holding a wheel that satisfies `requirement`."""
    req = Requirement(requirement)
    for entry in find_links.split():
        path = Path(entry.removeprefix("file://"))
        if not path.is_dir():
            continue
        for wheel in sorted(path.glob("*.whl")):
            name, _, rest = wheel.name.partition("-")
            try:
                version = Version(rest.split("-")[0])
            except InvalidVersion:
                continue
            if canonicalize_name(name) == canonicalize_name(req.name) and req.specifier.contains(version, prereleases=True):
                return path
    return None


def ca_bundle() -> Path:
    for value in (os.environ.get("SSL_CERT_FILE"), os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if value and Path(value).is_file():
            return Path(value)
    import certifi

    return Path(certifi.where())


def build_argv(cli: ContainerCLI, cfg: SoarConfig, spec: ImageSpec, context: Path, empty_dir: Path) -> list[str]:
    pip = pip_settings()
    args = ["build", "--network", "host", "--secret", f"id=ca_bundle,src={ca_bundle()}",
            "-f", str(context / spec.dockerfile), "-t", spec.tag]
    if cli.name == "podman":
        args += ["--format", "docker"]  # SHELL (bash, for `source`) is a Docker-format instruction
    index = pip.get("index-url", "")
    if index.startswith(("http://", "https://")):
        args += ["--build-arg", f"PIP_INDEX_URL={index}"]
    if not spec.gpu:
        wheels = wheel_dir_with(cfg.package.cpu_image.torch, pip.get("find-links", ""))
        args += ["--build-context", f"wheels={wheels or empty_dir}"]
        if wheels is None:
            args += ["--build-arg", f"TORCH_INDEX_URL={cfg.package.cpu_image.torch_index_url}"]
    return cli.argv(*args, str(context))


def build(cli: ContainerCLI, cfg: SoarConfig, spec: ImageSpec, context: Path, log_path: Path) -> float:
    """Build `spec` from `context` (the CPU base made first when missing); returns the build seconds."""
    if not spec.gpu:
        spec_cpu = cfg.package.cpu_image
        ensure_cpu_base(cli, spec.base, spec_cpu.suite, spec_cpu.apt_sources, log_path)
    empty = context.parent / f".{context.name}.no-wheels"
    empty.mkdir(exist_ok=True)
    argv = build_argv(cli, cfg, spec, context, empty)
    print(f"package: building {spec.tag} with {cli.name} (log {log_path})")
    start = time.monotonic()
    try:
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=cli.full_env()).returncode
    finally:
        empty.rmdir()
    if code != 0:
        raise SoarError(f"{cli.name} build of {spec.tag} failed (exit {code}); log {log_path}: {log_tail(log_path)}",
                        f"read {log_path}, or set package.build_image=false to only write the files")
    return time.monotonic() - start
