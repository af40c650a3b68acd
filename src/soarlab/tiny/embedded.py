"""Install the shipped tiny checkpoint (and its speculative-decoding draft), checked against their sha256 manifests."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from soarlab.atomic import atomic_dir
from soarlab.errors import SoarError

CHECKPOINT_DIR = Path(__file__).parent / "checkpoint"
DRAFT_DIR = Path(__file__).parent / "draft"  # a small Llama draft for the tiny model (spec=standalone)
MANIFEST = "SHA256SUMS"  # `sha256sum` format: "<hex>  <name>" per file, so `sha256sum -c` checks it too


def _regenerate(folder: Path) -> str:
    flag = " --draft" if folder.name == DRAFT_DIR.name else ""
    return f"`git checkout src/soarlab/tiny/{folder.name}` or scripts/build_tiny_model.py{flag}"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(folder: Path) -> Path:
    """SHA256SUMS for every file of `folder` (what verify_checkpoint checks)."""
    lines = [f"{file_sha256(p)}  {p.name}" for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n")
    return folder / MANIFEST


def verify_checkpoint(folder: Path = CHECKPOINT_DIR) -> list[str]:
    """The checkpoint's file names, each checked against SHA256SUMS; a missing, extra or changed file fails."""
    manifest, what, fix = folder / MANIFEST, f"the shipped tiny {folder.name}", _regenerate(folder)
    if not manifest.is_file():
        raise SoarError(f"{what} has no {manifest}", fix)
    expected = {}  # name -> sha256
    for line in filter(str.strip, manifest.read_text().splitlines()):
        digest, name = line.split(maxsplit=1)
        expected[name] = digest
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    if present != set(expected):
        diff = sorted(present ^ set(expected))
        raise SoarError(f"{what}'s files differ from {manifest}: {', '.join(diff)}", fix)
    changed = sorted(name for name, digest in expected.items() if file_sha256(folder / name) != digest)
    if changed:
        raise SoarError(f"{what}'s {', '.join(changed)} fail their sha256", fix)
    return sorted(expected)


def install_tiny_model(target: Path, folder: Path = CHECKPOINT_DIR) -> Path:
    """Copy the checked checkpoint (or draft) to `target` (atomically): the same bytes on every machine."""
    names = verify_checkpoint(folder)
    with atomic_dir(target) as tmp:
        for name in names:
            shutil.copyfile(folder / name, tmp / name)
    return Path(target)
