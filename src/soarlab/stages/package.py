"""Stage package: the SOAR submission (RULES.md 4) in reports/package/.

    reports/package/submission/         prepare_env.sh, prepare_model.sh, soarlab/ (src, conf, pyproject.toml)
    reports/package/submission.tar.gz   what is uploaded (size checked against package.max_size_bytes)
    reports/package/Dockerfile          the submission in the base image (+ docker-entrypoint.sh)
    reports/package/metrics.json        tarball_bytes, submission_files, size_limit_bytes, image_built
    reports/package/summary.json        SGLANG_SERVER_ARGS, quant preset, image status and why

SGLANG_SERVER_ARGS is rendered by soarlab.engines.sglang from the engine config (the same code
that launches SGLang here); when the pipeline runs another engine (transformers on CPU), the
submission still targets SGLang and uses `package.sglang` (conf/engine/sglang.yaml by default,
composed into params.yaml like every other key). The quant section is frozen into
the bundled conf/quant/submission.yaml, which prepare_model.sh passes as `quant=submission`.
"""

from __future__ import annotations

import gzip
import io
import re
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

from omegaconf import OmegaConf

from soarlab.atomic import atomic_dir, write_json
from soarlab.engines.process import log_tail
from soarlab.errors import SoarError
from soarlab.package import TEMPLATES, render
from soarlab.paths import project_root

SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_./:=,+@%-]+$")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")


def submission_engine(cfg):
    """The pipeline's engine when it runs SGLang (what was benchmarked), else `package.sglang`."""
    return cfg.engine if cfg.engine.name == "sglang" else cfg.package.sglang


def server_args_string(cfg) -> str:
    from soarlab.engines.sglang import server_flags

    flags = server_flags(submission_engine(cfg), cfg.quant.serve_quantization)
    bad = [f for f in flags if not SAFE_TOKEN.match(f)]
    if bad:
        raise SoarError(
            f"SGLANG_SERVER_ARGS would contain {bad[0]!r}, which the platform's word splitting would break",
            "use flag values without spaces or shell characters in engine.server_args",
        )
    return " ".join(flags)


def copy_project(root: Path, dest: Path) -> None:
    """The soarlab source the scripts run: src/soarlab, conf/, pyproject.toml."""
    shutil.copytree(root / "src" / "soarlab", dest / "src" / "soarlab", ignore=IGNORE)
    shutil.copytree(root / "conf", dest / "conf", ignore=IGNORE)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")


def make_tarball(src_dir: Path, tar_path: Path) -> int:
    """Reproducible .tar.gz of src_dir's contents (sorted, fixed mtime/owner); returns its size."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src_dir.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(src_dir)), recursive=False, filter=clean)
    with open(tar_path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    return tar_path.stat().st_size


def docker_engine() -> tuple[bool, str]:
    """(available, why): the docker client exists and an engine answers `docker info`."""
    if shutil.which("docker") is None:
        return False, "docker client not installed"
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False, "`docker info` timed out (no Docker engine answering)"
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
        return False, "no Docker engine answers `docker info`" + (f" ({lines[-1].strip()[:200]})" if lines else "")
    return True, "Docker engine answers `docker info`"


def build_mode(value) -> str:
    text = str(value).strip().lower()
    if text in ("auto",):
        return "auto"
    if text in ("true", "1", "yes", "on"):
        return "true"
    if text in ("false", "0", "no", "off", "none"):
        return "false"
    raise SoarError(f"package.build_image={value!r} is not auto, true or false", "set package.build_image=auto")


def build_image(context: Path, tag: str, log_path: Path) -> None:
    with open(log_path, "wb") as log:
        code = subprocess.run(["docker", "build", "-t", tag, str(context)], stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SoarError(f"docker build of {tag} failed (exit {code}); log {log_path}: {log_tail(log_path)}",
                        f"read {log_path}, or set package.build_image=false to only write the files")


def run(cfg) -> Path:
    root = project_root()
    out = root / cfg.paths.reports / "package"
    pkg = cfg.package
    server_args = server_args_string(cfg)
    quant, quant_preset = cfg.quant, str(cfg.quant.name)
    mode = build_mode(pkg.build_image)
    tag = str(pkg.image_tag)
    version = f"soarlab {_version()}"
    packages = " ".join(shlex.quote(str(p)) for p in pkg.pip_packages)
    uv_extra = " ".join(shlex.quote(str(a)) for a in pkg.uv_extra_args)

    with atomic_dir(out) as tmp:
        sub = tmp / "submission"
        sub.mkdir()
        (sub / "prepare_env.sh").write_text(render("prepare_env.sh", {
            "SGLANG_SERVER_ARGS": shlex.quote(server_args), "PIP_PACKAGES": packages,
            "UV_EXTRA_ARGS": uv_extra, "SOARLAB_VERSION": version,
        }))
        (sub / "prepare_model.sh").write_text(render("prepare_model.sh", {
            "QUANT_PRESET": quant_preset, "MODEL": str(pkg.model), "SOARLAB_VERSION": version,
        }))
        (sub / "prepare_model.sh").chmod(0o755)
        copy_project(root, sub / "soarlab")
        quant_yaml = OmegaConf.to_yaml(quant, resolve=True)
        (sub / "soarlab" / "conf" / "quant").mkdir(parents=True, exist_ok=True)
        (sub / "soarlab" / "conf" / "quant" / "submission.yaml").write_text(
            f"# The quant section this submission was packaged with (preset {quant_preset}), frozen by soarlab package.\n"
            + quant_yaml
        )
        (tmp / "Dockerfile").write_text(render("Dockerfile", {"BASE_IMAGE": str(pkg.base_image), "IMAGE_TAG": tag}))
        shutil.copy2(TEMPLATES / "docker-entrypoint.sh", tmp / "docker-entrypoint.sh")
        (tmp / ".dockerignore").write_text("submission.tar.gz\n*.log\nmetrics.json\nsummary.json\n")

        tar_path = tmp / "submission.tar.gz"
        size = make_tarball(sub, tar_path)
        limit = int(pkg.max_size_bytes)
        if size > limit:
            raise SoarError(
                f"submission.tar.gz is {size} bytes, over the limit of {limit} bytes (package.max_size_bytes, RULES.md 4)",
                "keep weights and large files out of src/ and conf/ (quantization runs on the platform)",
            )

        available, why = (False, "package.build_image=false") if mode == "false" else docker_engine()
        built = False
        if mode == "true" and not available:
            raise SoarError(f"no Docker engine to build the image ({why})",
                            "start the Docker daemon, or set package.build_image=auto (or false) to skip the image")
        if mode != "false" and available:
            build_image(tmp, tag, tmp / "docker-build.log")
            built, why = True, f"built {tag}"
        elif mode == "auto":
            why = f"image not built: {why}"
        n_files = sum(1 for p in sub.rglob("*") if p.is_file())
        write_json(tmp / "metrics.json", {
            "tarball_bytes": size, "submission_files": n_files, "size_limit_bytes": limit, "image_built": int(built),
        })
        write_json(tmp / "summary.json", {
            "sglang_server_args": server_args, "quant_preset": quant_preset, "base_image": str(pkg.base_image),
            "image_tag": tag, "build_image": mode, "image_built": built, "image_status": why,
            "tarball": "submission.tar.gz",
        })
    print(f"package: {out / 'submission.tar.gz'} ({size} bytes); SGLANG_SERVER_ARGS={server_args}; {why}")
    return out


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("soarlab")
    except Exception:  # not installed (e.g. run from the bundled source)
        return "source"
