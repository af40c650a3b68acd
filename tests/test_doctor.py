"""doctor runs for real on this machine (no GPU, no Docker engine, no SGLang) and says so."""

from __future__ import annotations

import subprocess
import sys

from soarlab import doctor


def test_doctor_reports_no_gpu_and_exits_zero():
    proc = subprocess.run([sys.executable, "-m", "soarlab.cli", "doctor"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for name in ("python", "torch", "cuda", "transformers", "gptqmodel", "sglang", "nvidia-smi"):
        assert name in rows, proc.stdout
    assert rows["python"].split()[1] == "OK" and rows["torch"].split()[1] == "OK"
    assert rows["cuda"].split()[1] == "NO" and "no GPU" in rows["cuda"]
    assert rows["nvidia-smi"].split()[1] == "NO"
    assert rows["sglang"].split()[1] == "NO" and "bash scripts/setup.sh --gpu" in rows["sglang"]
    assert "docker engine" in proc.stdout and "podman engine" in proc.stdout


def test_package_rows():
    assert doctor.check_package("no_such_pkg_xyz") == ("no_such_pkg_xyz", False, "not installed")
    name, ok, version = doctor.check_package("yaml", dist="PyYAML")
    assert (name, ok) == ("yaml", True) and version[0].isdigit()


def test_sglang_row_reads_engine_python(tmp_path):
    """engine.python pointing at an interpreter without SGLang (this one): the row says how to make it."""
    name, ok, detail = doctor.check_sglang(sys.executable)
    assert (name, ok) == ("sglang", False) and "not installed in engine.python" in detail and "--gpu" in detail
    name, ok, detail = doctor.check_sglang(str(tmp_path / "none" / "python"))
    assert not ok and "does not exist" in detail


