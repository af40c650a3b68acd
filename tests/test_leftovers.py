"""Nothing left behind (issue 12, parts 4-6): temp outputs of killed runs, the MLflow store race,
library temp folders, hung servers, the start probe, report permissions. Real processes, a real
MLflow sqlite store, real loopback servers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from soarlab import atomic, leftovers
from soarlab.bench.requests import BenchRequest
from soarlab.bench.runner import run_level
from soarlab.config import compose, to_yaml
from soarlab.engines.server import Server, free_port
from soarlab.schema import Paths

from support import ROOT, SilentServer, bench_cfg

KILLED_WRITER = """
import sys, time
from soarlab.atomic import atomic_dir
with atomic_dir(sys.argv[1]) as tmp:
    (tmp / "half.json").write_text("{")
    print(tmp, flush=True)
    time.sleep(600)
"""


def leave_temp_output(target: Path) -> Path:
    """What a run SIGKILLed while writing `target` leaves: its temporary folder."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    tmp = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert tmp.is_dir() and tmp.name.startswith(f".{target.name}.{proc.pid}-")
    return tmp


def test_killed_runs_temp_outputs_are_listed_untracked_and_removed(conf_project, tmp_path):
    bench_tmp = leave_temp_output(conf_project / "reports" / "bench")
    model_tmp = leave_temp_output(conf_project / "models" / "quantized")
    (conf_project / "reports" / "score.json").write_text('{"final": 1.0}\n')
    live = conf_project / "reports" / f".bench.{os.getpid()}-live.tmp"  # a running writer's: never touched
    live.mkdir()
    paths = Paths(reports="reports", data="data", base_model="models/base", quantized_model="models/quantized",
                  draft_model="models/draft")
    assert atomic.project_temp_outputs(conf_project, paths) == sorted([bench_tmp, model_tmp])

    # doctor names them with the command that removes them
    (conf_project / "params.yaml").write_text(to_yaml(compose(["engine=external"], root=ROOT)))  # the same paths
    proc = subprocess.run([sys.executable, "-m", "soarlab.cli", "doctor"], cwd=conf_project, capture_output=True, text=True,
                          timeout=300)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("temp output")]
    assert len(rows) == 2 and all(" NO " in row and "Fix: rm -rf " in row and len(row) <= 200 for row in rows), rows
    assert sorted(row.rsplit(" ", 1)[1] for row in rows) == sorted([str(bench_tmp), str(model_tmp)])

    # track never uploads them
    import mlflow

    from soarlab.tracking.pipeline_run import log_pipeline_run

    cfg = compose(["engine=external", "quant=none", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                   "tracking.experiment=t"], root=ROOT)
    run_id = log_pipeline_run(cfg, conf_project / "reports", conf_project / "params.yaml")
    client = mlflow.MlflowClient(cfg.tracking.uri)
    uploaded = [a.path for a in client.list_artifacts(run_id, "reports")]
    assert uploaded == ["reports/score.json"]

    # the next stage run removes them (here `score`, which then fails for want of inputs: still cleaned)
    proc = subprocess.run([sys.executable, "-m", "soarlab.cli", "stage", "score"], cwd=conf_project, capture_output=True,
                          text=True, timeout=300)
    assert f"removed {bench_tmp}" in proc.stdout and f"removed {model_tmp}" in proc.stdout
    assert not bench_tmp.exists() and not model_tmp.exists() and live.exists()


def test_next_write_to_the_same_place_removes_a_killed_writers_temp(tmp_path):
    stale = leave_temp_output(tmp_path / "bench")
    atomic.write_json(tmp_path / "other.json", {})  # another target: not its business
    assert stale.exists()
    with atomic.atomic_dir(tmp_path / "bench") as tmp:
        (tmp / "S1.json").write_text("{}")
    assert not stale.exists() and (tmp_path / "bench" / "S1.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "other.json"]


def test_reports_get_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        atomic.write_json(tmp_path / "r" / "metrics.json", {"a": 1})
        with atomic.atomic_dir(tmp_path / "bench") as tmp:
            atomic.write_text(tmp / "S1.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "r" / "metrics.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "bench").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "bench" / "S1.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("umask, file_mode, script_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_files_libraries_write_owner_only_get_the_umask_s_modes(tmp_path, umask, file_mode, script_mode):
    """safetensors 0.8 writes model.safetensors 0600 (its own temporary, renamed): models/base had one
    owner-only file among 0644 ones (issue 21). Real safetensors; the modes a plain open() would give."""
    import torch
    from safetensors.torch import save_file

    old = os.umask(umask)
    try:
        with atomic.atomic_dir(tmp_path / "model") as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))
            (tmp / "run.sh").write_text("#!/bin/sh\n")
            (tmp / "run.sh").chmod(0o700)
        with atomic.atomic_path(tmp_path / "single.safetensors") as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp))
    finally:
        os.umask(old)
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "single.safetensors").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "model" / "run.sh").stat().st_mode & 0o777 == script_mode
    assert (tmp_path / "model").stat().st_mode & 0o777 == script_mode


def test_gptqmodel_logs_go_to_a_scratch_folder_that_is_removed(tmp_path):
    from gptqmodel.looper import loop_processor

    from soarlab.quant.quantize import _gptqmodel_logs_elsewhere

    stale = leave_temp_output(tmp_path / "gptqmodel-logs")  # a killed quantize's
    before = set(Path("/tmp").glob("gptqmodel-logs-*"))
    with _gptqmodel_logs_elsewhere(tmp_path):
        log_dir = Path(loop_processor._PROJECT_LOG_DIR)
        assert log_dir.parent == tmp_path and log_dir.is_dir() and not stale.exists()
        (log_dir / "layer.log").write_text("x")
    assert not log_dir.exists() and list(tmp_path.iterdir()) == []
    assert set(Path("/tmp").glob("gptqmodel-logs-*")) <= before


STORE_WRITER = """
import sys, time
from soarlab.config import compose
from soarlab.tracking.pipeline_run import log_pipeline_run
uri, reports, params, ready, n, root = sys.argv[1:]
cfg = compose(["engine=external", "quant=none", f"tracking.uri={uri}", "tracking.experiment=race"], root=root)
import mlflow, sqlalchemy  # imported before the barrier, so that the processes meet at store creation
from pathlib import Path
Path(ready, str(__import__("os").getpid())).touch()
while len(list(Path(ready).iterdir())) < int(n):
    time.sleep(0.001)
print(log_pipeline_run(cfg, reports=__import__("pathlib").Path(reports), params_file=__import__("pathlib").Path(params)))
"""


def test_two_processes_creating_one_new_mlflow_store_both_log(tmp_path):
    import mlflow

    reports = tmp_path / "reports"
    (reports / "bench").mkdir(parents=True)
    (reports / "bench" / "metrics.json").write_text('{"S1_duration_s": 1.0}')
    params = tmp_path / "params.yaml"
    params.write_text("a: 1\n")
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    ready = tmp_path / "ready"  # a barrier: every process past its imports, then all released at once
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", STORE_WRITER, uri, str(reports), str(params), str(ready), "3", str(ROOT)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err[-2000:]
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted(out.strip().splitlines()[-1] for out, _ in results)


def test_hung_server_is_given_up_on_per_level_not_per_request():
    server = SilentServer()
    try:
        requests = [BenchRequest(index=i, line=i + 1, prompt="hello " * 5, prompt_len=6, output_len=8) for i in range(12)]
        bench = bench_cfg(request_timeout_s=3600, level_timeout_s=2, warmup_requests=0, flush_cache=False)
        report, rows = run_level(Server(f"http://127.0.0.1:{server.port}", "openai", model="m"), requests, "S1", 1, bench)
    finally:
        server.close()
    assert not report.valid and report.method.level_timeout_s == 2
    errors = [row["error"] for row in rows]
    assert len(errors) == 12 and all("abandoned" in e and "bench.level_timeout_s" in e for e in errors)
    assert not any("timed out after" in e for e in errors)  # no request waited out bench.request_timeout_s


def test_start_probe_honours_connect_timeout(tmp_path):
    server = SilentServer()
    try:
        speed = tmp_path / "speed.jsonl"
        speed.write_text(json.dumps({"question": "a b c", "model_response": "d e f"}) + "\n")
        proc = subprocess.run([sys.executable, "-m", "soarlab.cli", "bench", "--url", f"http://127.0.0.1:{server.port}",
                               "--dataset", str(speed), "--level", "S1", "--output-dir", str(tmp_path / "out"),
                               "bench.connect_timeout_s=1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        server.close()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no server answers" in proc.stderr and "within 1 s (bench.connect_timeout_s)" in proc.stderr


def test_port_conflict_is_listed_with_its_fix(tmp_path, monkeypatch):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    monkeypatch.setenv("SOARLAB_STATE_DIR", str(tmp_path / "state"))
    try:
        cfg = compose([f"engine.port={port}"], root=ROOT)
        (name, ok, detail), = leftovers.port_rows(cfg)
    finally:
        holder.close()
    assert (name, ok) == (f"port {port}", False)
    assert f"pid {os.getpid()}" in detail and f"Fix: kill {os.getpid()}, or set engine.port" in detail
    assert leftovers.port_rows(cfg)[0][1] is True  # free again


def test_a_lease_record_of_an_ended_run_is_reported_then_removed_by_the_next_start(state_dir):
    """A run killed outright leaves its port's record; its server is gone too. doctor says so, and the
    next server start removes it (a real exited process's pid, a real lock file)."""
    from soarlab.engines.port_lease import PortLease, lease_port, stale_leases

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lease = PortLease(free_port())
    assert lease.acquire()
    lease.write(int(ended.stdout), ["server"], "server.log")
    lease.release(forget=False)  # as a killed run leaves it
    assert stale_leases() == [lease.record_path]
    row = next(row for row in leftovers.server_rows() if row[0] == "stale leases")
    assert row[1] is False and "port records of ended runs: 1," in row[2] and "next server start removes them" in row[2]
    taken = lease_port("127.0.0.1", 0)
    try:
        assert stale_leases() == [] and not lease.record_path.exists()
        assert all(row[0] != "stale leases" for row in leftovers.server_rows())
    finally:
        taken.release()
