"""SGLang's own environment (`bash scripts/setup.sh --gpu`, requirements/sglang.txt) resolves against the
package index for a GPU machine: Linux x86-64, CPython 3.12 and 3.11. A pin conflict, or a release that
cannot load MiniCPM-SALA, fails here. Needs the package index (uv's resolver, no install)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from support import ROOT

REQUIREMENTS = ROOT / "requirements" / "sglang.txt"
FIRST_WITH_MINICPM_SALA = Version("0.5.19")  # SGLang's model registry has MiniCPM-SALA from this release on


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert found, "uv is a dev dependency: run `bash scripts/setup.sh`"
    return found


def test_sglang_pin_loads_minicpm_sala():
    reqs = [Requirement(line) for line in REQUIREMENTS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    (sglang,) = [r for r in reqs if r.name == "sglang"]
    (spec,) = sglang.specifier
    assert spec.operator == "==" and Version(spec.version) >= FIRST_WITH_MINICPM_SALA


@pytest.mark.parametrize("python", ["3.12", "3.11"])
def test_sglang_environment_resolves_for_linux_x86_64(tmp_path, python):
    lock = tmp_path / "sglang.lock"
    proc = subprocess.run(
        [uv(), "pip", "compile", "--quiet", "--python-version", python, "--python-platform", "x86_64-manylinux_2_34",
         "--no-header", str(REQUIREMENTS), "-o", str(lock)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    pins = {line.split("==")[0]: line.split("==")[1] for line in lock.read_text().splitlines() if "==" in line}
    assert {"sglang", "torch", "transformers"} <= set(pins)
