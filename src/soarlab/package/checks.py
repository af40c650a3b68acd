"""Checks a submission must pass before anyone uploads it (RULES.md 4: one .tar.gz of at most 2 GB).

- size: the tarball is at most `package.max_size_bytes`;
- contents: only what the platform needs: no virtual environment, MLflow store, data, weights,
  secrets, VCS folders, and no absolute path of the build machine inside any text file;
- index only: prepare_env.sh installs named packages from the package index, nothing fetched
  from elsewhere (URLs, VCS, local paths), since the evaluation machine reaches only the index.
"""

from __future__ import annotations

import fnmatch
import re
import tarfile
from pathlib import Path

from soarlab.errors import SoarError

# Text that is a secret whatever file holds it.
SECRET_TEXT = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----|\bhf_[A-Za-z0-9]{30,}\b|\bAKIA[0-9A-Z]{16}\b"
                         rb"|\bghp_[A-Za-z0-9]{30,}\b|\bsk-[A-Za-z0-9]{32,}\b")
TEXT_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".json", ".jsonl", ".toml", ".txt", ".cfg", ".md", ".jinja", ""}


def check_size(size: int, limit: int, draft_bytes: int = 0) -> None:
    if size > limit:
        draft = f", the speculative-decoding draft {draft_bytes} of them before compression" if draft_bytes else ""
        raise SoarError(
            f"submission.tar.gz is {size} bytes, over the limit of {limit} bytes (package.max_size_bytes, RULES.md 4){draft}",
            "keep weights and large files out of src/ and conf/ (quantization runs on the platform); "
            "a smaller draft model (spec.draft), or spec=ngram, which ships none",
        )


def content_problems(tar_path: Path, forbidden: list[str], build_paths: list[str], shipped: set[str] = frozenset()) -> list[str]:
    """What in the tarball the platform must not get: forbidden names (globs on every path part and
    on the whole path), secrets in text, absolute paths of this machine, links leaving the bundle.
    `shipped`: member names the submission holds on purpose (the speculative-decoding draft's weights),
    exempt from the forbidden names only."""
    problems = []
    needles = [p.encode() for p in build_paths if p and p != "/"]
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            name = member.name
            parts = Path(name).parts
            hit = None if name in shipped else next(
                (g for g in forbidden for part in (*parts, name) if fnmatch.fnmatch(part, g)), None)
            if hit:
                problems.append(f"{name} (matches {hit!r} of package.forbidden)")
                continue
            if member.issym() or member.islnk():
                if member.linkname.startswith("/") or ".." in Path(member.linkname).parts:
                    problems.append(f"{name} (a link to {member.linkname}, outside the bundle)")
                continue
            if not member.isfile() or Path(name).suffix not in TEXT_SUFFIXES:
                continue
            data = tar.extractfile(member).read()
            if SECRET_TEXT.search(data):
                problems.append(f"{name} (holds what looks like a key or token)")
            path = next((n for n in needles if n in data), None)
            if path:
                problems.append(f"{name} (holds {path.decode()}, a path of the build machine)")
    return problems


def check_contents(tar_path: Path, forbidden: list[str], build_paths: list[str], shipped: set[str] = frozenset()) -> None:
    problems = content_problems(tar_path, forbidden, build_paths, shipped)
    if problems:
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise SoarError(f"the submission holds what the platform must not get: {'; '.join(problems[:3])}{more}",
                        "remove those files from src/ or conf/ (package bundles both), or fix package.forbidden")


def check_index_only(pip_packages: list[str], uv_extra_args: list[str]) -> None:
    """prepare_env.sh may reach only the package index: named requirements, no URLs, VCS or paths."""
    for req in pip_packages:
        text = str(req).strip()
        if "://" in text or text.startswith(("git+", "/", ".", "~")) or " @ " in text or text.endswith((".whl", ".tar.gz")):
            raise SoarError(f"package.pip_packages entry {text!r} is fetched from outside the package index",
                            "name a released package with a version (e.g. gptqmodel==7.6.0)")
    for arg in uv_extra_args:
        if str(arg).startswith(("--find-links", "-f", "file:")) or str(arg).startswith("/"):
            raise SoarError(f"package.uv_extra_args holds {arg!r}, a source the evaluation machine does not have",
                            "pass only index options (e.g. --index-url https://mirror/simple)")
