"""Stage package: the SOAR submission (RULES.md 4) in reports/package/.

    reports/package/submission/         prepare_env.sh, prepare_model.sh, soarlab/ (src, conf, pyproject.toml)
    reports/package/submission.tar.gz   what is uploaded (size checked against package.max_size_bytes)
    reports/package/Dockerfile          GPU serving image: the submission on the platform's image
    reports/package/Dockerfile.cpu      CPU serving image: the same flow on Debian + transformers serve
    reports/package/container-entrypoint.sh   the platform's flow in the container (RULES.md 4)
    reports/package/metrics.json        tarball_bytes, submission_files, size_limit_bytes, image_built,
                                        image_bytes, build_s, start_to_healthy_s (when built)
    reports/package/summary.json        SGLANG_SERVER_ARGS, quant preset, image status and why
    reports/package/image.json          the built image's tag and id (nulls when none): what evaluate depends on
    reports/package/build.log, container.log   the image build and the timed container start

Before anything is written the submission is checked (soarlab.package.checks): size limit,
contents, installs from the package index only. The image for engine.name is built with
package.container_cli when package.build_image says so (auto: when engine.launcher=container),
then started once the way bench and accuracy start it, to time start-to-healthy.

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
import sys
import tarfile
from pathlib import Path

from soarlab.atomic import atomic_dir, copy_tree, write_json
from soarlab.config import to_yaml
from soarlab.errors import SoarError
from soarlab.package import TEMPLATES, checks, render
from soarlab.package.image import write_dockerfiles
from soarlab.paths import LOGS_DIR, METRICS_FILE, project_root
from soarlab.schema import ExternalEngine, SGLangEngine, SoarConfig

SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_./:=,+@%-]+$")
DRAFT = "draft"  # the submission's folder holding the speculative-decoding draft
# prepare_env.sh's addition to SGLANG_SERVER_ARGS when a draft ships ($_soarlab_here: where it was unpacked)
DRAFT_FLAG = f'" --speculative-draft-model-path $_soarlab_here/{DRAFT}"'
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")


def submission_engine(cfg: SoarConfig) -> SGLangEngine:
    """The pipeline's engine when it runs SGLang (what was benchmarked), else `package.sglang`."""
    return cfg.engine if isinstance(cfg.engine, SGLangEngine) else cfg.package.sglang


def in_container(cfg: SoarConfig) -> bool:
    """Whether the pipeline serves from the serving image (engine.launcher=container; external has no launcher)."""
    return not isinstance(cfg.engine, ExternalEngine) and cfg.engine.launcher == "container"


def server_args_string(cfg: SoarConfig) -> str:
    """SGLANG_SERVER_ARGS: the engine's flags and the speculative ones, less the draft's path, which
    prepare_env.sh adds where the platform unpacked the submission (DRAFT_FLAG)."""
    from soarlab import speculative
    from soarlab.engines.sglang import server_flags

    flags = server_flags(submission_engine(cfg), cfg.quant.serve_quantization) + speculative.server_flags(cfg.spec, None)
    bad = [f for f in flags if not SAFE_TOKEN.match(f)]
    if bad:
        raise SoarError(
            f"SGLANG_SERVER_ARGS would contain {bad[0]!r}, which the platform's word splitting would break",
            "use flag values without spaces or shell characters in engine.server_args",
        )
    return " ".join(flags)


def copy_project(root: Path, dest: Path) -> None:
    """The soarlab source the scripts run: src/soarlab (less the embedded tiny checkpoint and its draft: the
    platform runs the real model, and the source holds no weights), conf/, pyproject.toml."""
    import soarlab
    from soarlab.tiny import CHECKPOINT_DIR, DRAFT_DIR

    source = root / "src" / "soarlab"
    shipped = [source / folder.relative_to(Path(soarlab.__file__).parent) for folder in (CHECKPOINT_DIR, DRAFT_DIR)]

    def ignore(folder: str, names: list[str]) -> set[str]:
        return set(IGNORE(folder, names)) | {s.name for s in shipped if Path(folder) == s.parent}

    copy_tree(source, dest / "src" / "soarlab", ignore=ignore)
    copy_tree(root / "conf", dest / "conf", ignore=IGNORE)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")


def copy_draft(draft_dir: Path, dest: Path) -> int:
    """The speculative-decoding draft's files (fetch-draft's output) into the submission; their bytes."""
    from soarlab.hub import validate_model_dir

    validate_model_dir(draft_dir)
    copy_tree(draft_dir, dest)
    return sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())


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


def build_and_time(cfg: SoarConfig, out: Path) -> tuple[dict, str]:
    """Build the engine's serving image and start it once; (metrics, status). See the module docstring."""
    import time

    from soarlab.container import container_tool
    from soarlab.engines import open_engine
    from soarlab.package.image import build, image_spec

    spec = image_spec(cfg)
    if spec is None:
        raise SoarError(f"engine={cfg.engine.name} has no serving image to build",
                        "use engine=transformers (CPU image) or engine=sglang (GPU image), or package.build_image=false")
    cli = container_tool(cfg.package.container_cli)
    # Logs are written outside the atomic output, so that a failure leaves them behind; copied in on success.
    logs = Path(cfg.paths.reports) / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "package-build.log").unlink(missing_ok=True)
    build_s = build(cli, cfg, spec, out, logs / "package-build.log")
    shutil.copy2(logs / "package-build.log", out / "build.log")
    metrics = {"image_built": 1, "image_bytes": cli.image_bytes(spec.tag), "build_s": round(build_s, 2)}
    write_json(out / "image.json", {"tag": spec.tag, "id": cli.image_id(spec.tag)})
    status = f"built {spec.tag} with {cli.name} in {build_s:.1f} s"
    if not in_container(cfg):
        return metrics, status + " (not started: engine.launcher is not container)"
    start = time.monotonic()
    with open_engine(cfg, cfg.paths.base_model, logs / "package-container.log"):
        metrics["start_to_healthy_s"] = round(time.monotonic() - start, 2)
    shutil.copy2(logs / "package-container.log", out / "container.log")
    return metrics, status + f"; healthy {metrics['start_to_healthy_s']} s after start"


def run(cfg: SoarConfig) -> Path:
    root = project_root()
    out = root / cfg.paths.reports / "package"
    pkg = cfg.package
    server_args = server_args_string(cfg)
    quant, quant_preset = cfg.quant, cfg.quant.name
    mode = str(pkg.build_image).lower()  # auto | true | false (soarlab.schema)
    tag = pkg.image_tag
    version = f"soarlab {_version()}"
    packages = " ".join(shlex.quote(p) for p in pkg.pip_packages)
    uv_extra = " ".join(shlex.quote(a) for a in pkg.uv_extra_args)
    checks.check_index_only(pkg.pip_packages, pkg.uv_extra_args)

    from soarlab import speculative

    ships_draft = speculative.needs_draft(cfg.spec)
    with atomic_dir(out) as tmp:
        sub = tmp / "submission"
        sub.mkdir()
        (sub / "prepare_env.sh").write_text(render("prepare_env.sh", {
            "SGLANG_SERVER_ARGS": shlex.quote(server_args), "DRAFT_FLAG": DRAFT_FLAG if ships_draft else "",
            "PIP_PACKAGES": packages, "UV_EXTRA_ARGS": uv_extra, "SOARLAB_VERSION": version,
        }))
        (sub / "prepare_model.sh").write_text(render("prepare_model.sh", {
            "QUANT_PRESET": quant_preset, "MODEL": pkg.model, "SOARLAB_VERSION": version,
        }))
        (sub / "prepare_model.sh").chmod(0o755)
        copy_project(root, sub / "soarlab")
        draft_bytes = copy_draft(root / cfg.paths.draft_model, sub / DRAFT) if ships_draft else 0
        quant_yaml = to_yaml(quant)
        (sub / "soarlab" / "conf" / "quant").mkdir(parents=True, exist_ok=True)
        (sub / "soarlab" / "conf" / "quant" / "submission.yaml").write_text(
            f"# The quant section this submission was packaged with (preset {quant_preset}), frozen by soarlab package.\n"
            + quant_yaml
        )
        shutil.copy2(TEMPLATES / "container-entrypoint.sh", tmp / "container-entrypoint.sh")
        write_dockerfiles(cfg, tmp, root)

        tar_path = tmp / "submission.tar.gz"
        size = make_tarball(sub, tar_path)
        limit = pkg.max_size_bytes
        checks.check_size(size, limit, draft_bytes)
        shipped = {f"{DRAFT}/{p.name}" for p in (sub / DRAFT).iterdir()} if ships_draft else set()
        checks.check_contents(tar_path, pkg.forbidden, [str(root), sys.prefix], shipped)

        metrics = {"image_built": 0}
        write_json(tmp / "image.json", {"tag": None, "id": None})  # replaced by build_and_time when built
        if mode == "false":
            why = "image not built: package.build_image=false"
        elif mode == "auto" and not in_container(cfg):
            why = "image not built: engine.launcher is not container (package.build_image=true builds it anyway)"
        else:
            metrics, why = build_and_time(cfg, tmp)
        n_files = sum(1 for p in sub.rglob("*") if p.is_file())
        write_json(tmp / METRICS_FILE, {
            "tarball_bytes": size, "submission_files": n_files, "size_limit_bytes": limit, "draft_bytes": draft_bytes,
            "draft_share_of_limit": round(draft_bytes / limit, 6), **metrics,
        })
        write_json(tmp / "summary.json", {
            "sglang_server_args": server_args, "quant_preset": quant_preset, "base_image": pkg.base_image,
            "image_tag": tag, "cpu_image_tag": pkg.cpu_image.tag, "build_image": mode,
            "image_built": bool(metrics["image_built"]), "image_status": why, "tarball": "submission.tar.gz",
        })
    # SGLANG_SERVER_ARGS are in summary.json: on a line of their own they would run past a terminal's width
    draft = f", the draft {draft_bytes} ({100 * draft_bytes / limit:.2f}% of the limit)" if ships_draft else ""
    print(f"package: {cfg.paths.reports}/package/submission.tar.gz ({size} bytes{draft}; SGLANG_SERVER_ARGS in "
          f"summary.json); {why}")
    return out


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("soarlab")
    except Exception:  # not installed (e.g. run from the bundled source)
        return "source"
