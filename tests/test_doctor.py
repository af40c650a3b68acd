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
    assert rows["sglang"].split()[1] == "NO" and "not installed" in rows["sglang"]
    assert "docker engine" in proc.stdout and "podman engine" in proc.stdout


def test_import_failure_reason_is_reported(tmp_path, monkeypatch):
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("raise RuntimeError('needs CUDA 12.8')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    name, ok, detail = doctor.check_package("brokenpkg", import_it=True)
    assert not ok and "needs CUDA 12.8" in detail
    assert doctor.check_package("no_such_pkg_xyz") == ("no_such_pkg_xyz", False, "not installed")
