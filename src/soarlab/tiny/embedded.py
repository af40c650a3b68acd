"""Install the shipped tiny checkpoint, checked against its sha256 manifest."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from soarlab.atomic import atomic_dir
from soarlab.errors import SoarError

CHECKPOINT_DIR = Path(__file__).parent / "checkpoint"
MANIFEST = "SHA256SUMS"  # `sha256sum` format: "<hex>  <name>" per file, so `sha256sum -c` checks it too
REGENERATE = ("restore it with `git checkout src/soarlab/tiny/checkpoint`, or regenerate it with "
              "`python scripts/build_tiny_model.py` (then measure the README's accuracy table again)")


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(folder: Path) -> Path:
    """SHA256SUMS for every file of `folder` (what verify_checkpoint checks)."""
    lines = [f"{file_sha256(p)}  {p.name}" for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n")
    return folder / MANIFEST


def verify_checkpoint(folder: Path = CHECKPOINT_DIR) -> list[str]:
    """The checkpoint's file names, each checked against SHA256SUMS; a missing, extra or changed file fails."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise SoarError(f"the embedded tiny checkpoint has no {manifest}", REGENERATE)
    expected = {}  # name -> sha256
    for line in filter(str.strip, manifest.read_text().splitlines()):
        digest, name = line.split(maxsplit=1)
        expected[name] = digest
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    if present != set(expected):
        diff = sorted(present ^ set(expected))
        raise SoarError(f"the embedded tiny checkpoint's files differ from {manifest}: {', '.join(diff)}", REGENERATE)
    changed = sorted(name for name, digest in expected.items() if file_sha256(folder / name) != digest)
    if changed:
        raise SoarError(f"the embedded tiny checkpoint's {', '.join(changed)} do not match their sha256 in {manifest}",
                        REGENERATE)
    return sorted(expected)


def install_tiny_model(target: Path) -> Path:
    """Copy the checked checkpoint to `target` (atomically): the same bytes on every machine."""
    names = verify_checkpoint()
    with atomic_dir(target) as tmp:
        for name in names:
            shutil.copyfile(CHECKPOINT_DIR / name, tmp / name)
    return Path(target)
