"""The embedded tiny model is shipped bytes: installed as they are and checked against SHA256SUMS."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from soarlab.errors import SoarError
from soarlab.tiny import CHECKPOINT_DIR, install_tiny_model, verify_checkpoint


def test_install_copies_the_checked_bytes(tmp_path):
    out = install_tiny_model(tmp_path / "base")
    names = verify_checkpoint()
    assert sorted(p.name for p in out.iterdir()) == names
    assert all((out / n).read_bytes() == (CHECKPOINT_DIR / n).read_bytes() for n in names)
    assert {oct((out / n).stat().st_mode & 0o777) for n in names} == {"0o644"}  # readable by all, as any output
    # the manifest is sha256sum's own format
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=CHECKPOINT_DIR, check=True)


@pytest.mark.parametrize("change", ["edit", "extra", "missing"])
def test_a_changed_checkpoint_is_refused_with_the_fix(tmp_path, change):
    copy = shutil.copytree(CHECKPOINT_DIR, tmp_path / "checkpoint")
    if change == "edit":
        data = bytearray((copy / "model.safetensors").read_bytes())
        data[-1] ^= 1
        (copy / "model.safetensors").write_bytes(bytes(data))
    elif change == "extra":
        (copy / "notes.txt").write_text("x")
    else:
        (copy / "tokenizer.json").unlink()
    with pytest.raises(SoarError) as info:
        verify_checkpoint(copy)
    assert {"edit": "model.safetensors do not match", "extra": "notes.txt", "missing": "tokenizer.json"}[change] in str(info.value)
    assert "scripts/build_tiny_model.py" in str(info.value)
