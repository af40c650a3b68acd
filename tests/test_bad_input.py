"""Every error a user can cause ends in one line, `soarlab: error: <problem>. Fix: <fix>`, with a non-zero
exit and no traceback (issue 12, part 2). Each case runs the real `soarlab` command in a subprocess.

A read-only reports/ and a full disk are real: a read-only bind mount and a 64 KiB tmpfs, mounted in a
private mount namespace (`unshare -rm`, which needs no root). Where the kernel refuses such namespaces,
the same errors are injected at the OS boundary instead (a `sitecustomize` that makes writes under
reports/ fail with EROFS / ENOSPC), and the test says so in its output.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from soarlab.config import compose, plain, to_yaml

from support import ROOT, copy_conf, package_cfg


def soarlab(*args: str, cwd: Path | None = None, env: dict | None = None, prefix: list[str] | None = None):
    cmd = [*(prefix or []), sys.executable, "-m", "soarlab.cli", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def assert_one_line_error(proc, *expected: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in lines if line.startswith("soarlab: error: ")]
    assert len(errors) == 1 and " Fix: " in errors[0], proc.stderr
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def write_params(proj: Path, *overrides: str) -> Path:
    cfg = compose([f"paths.reports={proj / 'reports'}", f"paths.data={proj / 'data'}",
                   f"paths.base_model={proj / 'models' / 'base'}", f"paths.quantized_model={proj / 'models' / 'quantized'}",
                   *overrides], root=proj)
    path = proj / "params.yaml"
    path.write_text(to_yaml(cfg))
    return path


# --- datasets -----------------------------------------------------------------------------------------

GOOD_ROW = {"task": "mcq", "question": "2+2? A) 3 B) 4", "gold": "B"}


@pytest.mark.parametrize("kind, expected", [
    ("binary", "looks binary"), ("gzip", "gzip-compressed"), ("utf16", "UTF-16"),
])
def test_binary_gzip_utf16_datasets(tmp_path, kind, expected):
    text = json.dumps(GOOD_ROW) + "\n"
    data = {"binary": bytes(range(256)) * 4, "gzip": gzip.compress(text.encode()), "utf16": text.encode("utf-16")}[kind]
    bad = tmp_path / f"set.{kind}.jsonl"
    bad.write_bytes(data)
    preds = tmp_path / "predictions.jsonl"
    preds.write_text(json.dumps({"prediction": "B"}) + "\n")
    # the correctness set (eval-score) and the speed set (fetch-data with bench.dataset.path) read the same way
    assert_one_line_error(soarlab("eval-score", "--dataset", str(bad), "--predictions", str(preds)), "not UTF-8", expected)
    proj = copy_conf(tmp_path / "proj")
    params = write_params(proj, f"bench.dataset.path={bad}")
    assert_one_line_error(soarlab("stage", "fetch-data", "--params", str(params), cwd=proj), "not UTF-8", expected)
    assert not (proj / "data" / "speed.jsonl").exists()


# --- model files --------------------------------------------------------------------------------------


def corrupt(model_dir: Path, tmp_path: Path, how: str) -> Path:
    bad = tmp_path / f"model-{how}"
    shutil.copytree(model_dir, bad)
    weights = bad / "model.safetensors"
    if how == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "zero-byte":
        weights.write_bytes(b"")
    elif how == "config-not-json":
        (bad / "config.json").write_text("{ this is not json")
    elif how == "config-list":
        (bad / "config.json").write_text("[1, 2, 3]")
    return bad


CASES = [("truncated", "not a complete safetensors file"), ("zero-byte", "not a complete safetensors file"),
         ("config-not-json", "is not valid JSON"), ("config-list", "holds a JSON list, not an object")]


@pytest.mark.parametrize("how, expected", CASES)
def test_corrupt_model_prepare_model_and_check_checkpoint(tiny_model_dir, tmp_path, how, expected):
    bad = corrupt(tiny_model_dir, tmp_path, how)
    out = tmp_path / "out" / "quantized"
    assert_one_line_error(soarlab("prepare-model", "--input", str(bad), "--output", str(out), "quant=rtn_w4", cwd=ROOT),
                          expected)
    assert not out.exists() and (not out.parent.exists() or list(out.parent.glob(".*")) == [])  # no temp left
    check = soarlab("check-checkpoint", str(bad))
    assert check.returncode == 1 and "Traceback" not in check.stderr and expected in check.stdout, check.stdout + check.stderr


@pytest.mark.parametrize("how, expected", CASES)
def test_corrupt_model_refused_before_a_server_starts(tiny_model_dir, tmp_path, how, expected):
    from soarlab.engines import open_engine
    from soarlab.errors import SoarError

    bad = corrupt(tiny_model_dir, tmp_path, how)
    cfg = compose(["engine.port=0"])
    with pytest.raises(SoarError, match=expected):
        with open_engine(cfg, bad, tmp_path / "server.log"):
            pass
    assert not (tmp_path / "server.log").exists()  # refused before anything was launched


def test_prepare_model_sh_leaves_no_output_folder_on_failure(tiny_model_dir, tmp_path, source_project):
    from soarlab.stages import package

    out = package.run(package_cfg(quant=plain(compose(["quant=rtn_w4"], root=ROOT).quant)))
    bad = corrupt(tiny_model_dir, tmp_path, "truncated")
    target = tmp_path / "processed"
    proc = subprocess.run(["bash", str(out / "submission" / "prepare_model.sh"), "--input", str(bad), "--output", str(target)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "SOARLAB_PYTHON": sys.executable})
    assert_one_line_error(proc, "not a complete safetensors file")
    assert not target.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- values -------------------------------------------------------------------------------------------


def test_score_rejects_nan_and_never_prints_it():
    for value in ("nan", "inf", "-5", "101"):
        proc = soarlab("score", "--durations", "S1=2,S8=2,Smax=2", "--best", "S1=1,S8=1,Smax=1", "--ori-accuracy", value)
        assert_one_line_error(proc, "not a percentage")
        assert "NaN" not in proc.stdout and "Infinity" not in proc.stdout
    proc = soarlab("score", "--durations", "S1=nan,S8=2,Smax=2", "--best", "S1=1,S8=1,Smax=1", "--ori-accuracy", "80")
    assert_one_line_error(proc, "duration of S1")


@pytest.mark.parametrize("port, expected", [("notaport", "should be a valid integer"), ("99999", "less than or equal to 65535")])
def test_bad_engine_port_at_params_and_at_stage_run(conf_project, tmp_path, port, expected):
    assert_one_line_error(soarlab("params", f"engine.port={port}", "--output", str(tmp_path / "p.yaml"), cwd=conf_project),
                          "engine.port", expected)
    assert not (tmp_path / "p.yaml").exists()
    # a params.yaml written by hand (or by `dvc exp run -S`) is refused by every stage before it runs, in one line
    params = write_params(conf_project)
    params.write_text(params.read_text().replace("port: 30000", f"port: {port}"))
    for stage in ("package", "bench"):
        assert_one_line_error(soarlab("stage", stage, "--params", str(params), cwd=conf_project), "engine.port", expected)
    assert not (conf_project / "reports").exists()


def test_debug_prints_the_traceback(conf_project, tmp_path):
    for extra, env in ((["--debug"], {}), ([], {"SOARLAB_DEBUG": "1"})):
        proc = soarlab(*extra, "params", "engine.port=notaport", "--output", str(tmp_path / "p.yaml"), cwd=conf_project, env=env)
        assert proc.returncode != 0 and "Traceback" in proc.stderr and "soarlab: error: config key engine.port" in proc.stderr


# --- file system: read-only, full -----------------------------------------------------------------------

# Writes under reports/ fail as the file system would; used only where mount namespaces are refused.
INJECT = """
import builtins, errno, os
_code = int(os.environ["SOARLAB_TEST_ERRNO"]); _where = os.environ["SOARLAB_TEST_DIR"]
_open = builtins.open
def _fail(path):
    raise OSError(_code, os.strerror(_code), str(path))
def open(file, mode="r", *a, **k):
    if any(c in mode for c in "wax+") and str(file).startswith(_where):
        _fail(file)
    return _open(file, mode, *a, **k)
builtins.open = open
_mkstemp_open = os.open
def _os_open(path, flags, *a, **k):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and str(path).startswith(_where):
        _fail(path)
    return _mkstemp_open(path, flags, *a, **k)
os.open = _os_open
"""


def namespaces_work() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True).returncode == 0


def score_project(proj: Path) -> Path:
    params = write_params(proj, "score.reference.source=config",
                          "score.reference.durations.S1=1", "score.reference.durations.S8=1", "score.reference.durations.Smax=1")
    for stage, metrics in (("bench", {"S1_duration_s": 2, "S8_duration_s": 2, "Smax_duration_s": 2}),
                           ("accuracy", {"ori_accuracy": 80.0})):
        (proj / "reports" / stage).mkdir(parents=True)
        (proj / "reports" / stage / "metrics.json").write_text(json.dumps(metrics))
    # what the reference stage writes with score.reference.source=config
    reference = {"source": "config", "durations": {"S1": 1.0, "S8": 1.0, "Smax": 1.0}, "runs": 0}
    (proj / "reports" / "reference.json").write_text(json.dumps(reference))
    return params


@pytest.mark.parametrize("case, mount, code, expected", [
    ("read-only reports/", "mount --bind reports reports && mount -o remount,bind,ro reports", 30,
     ("Read-only file system", "read-only")),
    ("full disk", "cp -r reports saved && mount -t tmpfs -o size=64k tmpfs reports && cp -r saved/. reports/ "
                  "&& (dd if=/dev/zero of=reports/filler bs=4k 2>/dev/null; true)", 28,
     ("No space left on device", "df -h")),
])
def test_read_only_reports_and_full_disk(conf_project, case, mount, code, expected, capsys):
    params = score_project(conf_project)
    if namespaces_work():
        cmd = f"cd {conf_project} && {mount} && exec {sys.executable} -m soarlab.cli stage score --params {params}"
        proc = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], capture_output=True, text=True, timeout=300)
    else:
        with capsys.disabled():
            print(f"\n{case}: mount namespaces refused here; the error is injected at the OS boundary instead")
        inject = conf_project / "inject"
        inject.mkdir()
        (inject / "sitecustomize.py").write_text(INJECT)
        env = {"PYTHONPATH": f"{inject}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "SOARLAB_TEST_ERRNO": str(code),
               "SOARLAB_TEST_DIR": str(conf_project / "reports")}
        proc = soarlab("stage", "score", "--params", str(params), cwd=conf_project, env=env)
    assert_one_line_error(proc, *expected)


def test_os_errors_map_to_one_line_with_their_fix():
    """The mapping itself, for the errors a test cannot cause as root (EACCES) as well."""
    import errno

    from soarlab.errors import error_line

    for code, fix in ((errno.EACCES, "chmod u+w"), (errno.ENOSPC, "df -h"), (errno.EROFS, "read-only")):
        line, exit_code = error_line(OSError(code, os.strerror(code), "/x/reports/score.json"))
        assert exit_code == 1 and line.startswith(os.strerror(code)) and "'/x/reports/score.json'" in line
        assert line.count(". Fix: ") == 1 and fix in line.split(". Fix: ")[1]


def on_full_disk(disk: Path, free_kib: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`soarlab ARGS` with `disk` a 3 MiB tmpfs holding `free_kib` KiB free (a private mount namespace)."""
    if not namespaces_work():
        pytest.skip("mount namespaces are refused here: no tmpfs to fill")
    cmd = (f"mkdir -p {disk} && mount -t tmpfs -o size=3m tmpfs {disk} && "
           f"(dd if=/dev/zero of={disk}/filler bs=1k count={3072 - free_kib} 2>/dev/null; true) && "
           f"exec {sys.executable} -m soarlab.cli {' '.join(args)}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_full_disk_during_package_is_one_short_line_naming_the_disk(source_project, tmp_path):
    """The submission's source tree copied onto a full reports/ (issue 21): shutil.copytree used to try
    every remaining file and raise one error listing them all (29,140 characters)."""
    reports = source_project / "reports"
    short = Path(tempfile.mkdtemp(dir="/tmp"))  # a project path of usual length, not pytest's long one
    (short / "proj").symlink_to(source_project)
    source_project = short / "proj"
    reports = source_project / "reports"
    cfg = compose([f"paths.reports={reports}"], root=source_project)
    (source_project / "params.yaml").write_text(to_yaml(cfg))
    try:
        proc = on_full_disk(reports, 100, "stage", "package", cwd=source_project)
    finally:
        shutil.rmtree(short)
    line = assert_one_line_error(proc, "No space left on device", f" on {reports} (")
    assert len(line) <= 220, line  # about 200: the mount and the file each named within errors._PATH_CHARS


@pytest.mark.parametrize("quant", ["rtn_w4", "none"])  # GPTQModel's writer; a plain copy of the weights
@pytest.mark.slow
def test_full_disk_during_prepare_model_names_the_disk(tiny_model_dir, source_project, quant):
    """GPTQModel's writer raised a full disk's error naming no file: the line named no disk."""
    disk = Path(tempfile.mkdtemp(dir="/tmp")) / "disk"  # a path of usual length
    try:
        proc = on_full_disk(disk, 300, "prepare-model", "--input", str(tiny_model_dir), "--output", f"{disk}/out",
                            f"quant={quant}", cwd=source_project)
    finally:
        shutil.rmtree(disk.parent)
    line = assert_one_line_error(proc, "No space left on device", f" on {disk} (", ", writing '")
    assert len(line) <= 200, line
