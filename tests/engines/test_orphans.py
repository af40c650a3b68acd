"""No orphan servers (issue 12, part 1): a server dies with the run that started it, however the run ends.

Real processes throughout: `soarlab stage bench` on the tiny model with the real `transformers serve`,
killed with SIGTERM and with SIGKILL, its port checked free afterwards; a stale server left by a run
whose lease is gone, stopped and reported by the next start. SGLang is the GPU engine and cannot run
here: where its launcher is used, a small stand-in HTTP server process replaces `sglang.launch_server`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soarlab import leftovers
from soarlab.engines import open_engine
from soarlab.engines import sglang as sglang_engine
from soarlab.engines.port_lease import PortLease, process_start_time
from soarlab.engines.process import spawn
from soarlab.engines.server import free_port, is_healthy, port_in_use

from support import (QUICK_BENCH, STAND_IN, bench_project, dvc_bench_project, engine_cfg, fake_model, make_project, pid_alive,
                     served_record, wait_for)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_bench_stage_leaves_no_server(tiny_model_dir, tmp_path, state_dir, sig):
    root = bench_project(tmp_path / "proj", tiny_model_dir)
    stage = subprocess.Popen([sys.executable, "-m", "soarlab.cli", "stage", "bench"], cwd=root,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        record = wait_for(lambda: served_record(state_dir), "the server's lease record")
        assert record["owner_pid"] == stage.pid
        wait_for(lambda: is_healthy(f"http://127.0.0.1:{record['port']}", timeout=2), "the server to answer")
        assert stage.poll() is None, stage.communicate()
        stage.send_signal(sig)
        _, err = stage.communicate(timeout=120)
    finally:
        if stage.poll() is None:
            stage.kill()
    wait_for(lambda: not port_in_use("127.0.0.1", record["port"]), f"port {record['port']} to be free", limit_s=60)
    wait_for(lambda: process_start_time(record["pid"]) != record["start_time"], "the server to be gone", limit_s=60)
    if sig == signal.SIGTERM:  # the stage ran its cleanup: a clean message, and the lease is given back
        assert stage.returncode == 128 + signal.SIGTERM and "soarlab: stopped by SIGTERM" in err and "Traceback" not in err
        assert served_record(state_dir) == {}
    else:
        assert stage.returncode == -signal.SIGKILL
    assert leftovers.stale_servers() == []


@pytest.mark.slow
@pytest.mark.parametrize("shell,sig", [("/bin/bash", signal.SIGTERM), ("/bin/dash", signal.SIGKILL)],
                         ids=["bash-SIGTERM", "dash-SIGKILL"])
def test_killed_dvc_stops_its_stage(tiny_model_dir, tmp_path, state_dir, shell, sig):
    """A signal to `dvc` alone (a CI timeout, a job scheduler, `kill <pid>`) stops the stage it runs: the
    server's port is free and no stage process remains. DVC runs the stage through $SHELL -c: bash
    replaces itself by the stage (DVC is the stage's parent), dash waits for it (the shell is)."""
    root = dvc_bench_project(tmp_path / "proj", tiny_model_dir)
    env = {**os.environ, "SHELL": shell, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # Its output to a file: the stage inherits it, and a pipe would stay open as long as the stage runs.
    with open(tmp_path / "dvc.log", "w") as log:
        dvc = subprocess.Popen(["dvc", "repro"], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    record = {}
    try:
        record = wait_for(lambda: served_record(state_dir), "the server's lease record")
        stage = record["owner_pid"]
        wait_for(lambda: is_healthy(f"http://127.0.0.1:{record['port']}", timeout=2), "the server to answer")
        between = int(Path(f"/proc/{stage}/stat").read_text().rpartition(")")[2].split()[1])
        assert (between == dvc.pid) == (shell == "/bin/bash"), "the shell case this test is about"
        os.kill(dvc.pid, sig)
        dvc.wait(timeout=60)
        wait_for(lambda: not port_in_use("127.0.0.1", record["port"]), f"port {record['port']} to be free", limit_s=30)
        wait_for(lambda: process_start_time(stage) is None and process_start_time(record["pid"]) is None,
                 "the stage and its server to be gone", limit_s=30)
    finally:
        if dvc.poll() is None:
            dvc.kill()
        dvc.wait()
        for pid in (record.get("owner_pid"), record.get("pid")):  # left running only when the test fails
            if pid and process_start_time(pid) is not None:
                os.kill(pid, signal.SIGKILL)
    assert not (root / "reports" / "bench").exists(), "a stopped stage writes no outputs dvc.lock does not record"
    assert leftovers.stale_servers() == []


def test_stale_server_of_ours_is_stopped_and_reported(tmp_path, state_dir, monkeypatch, capsys):
    """A server whose run is gone but which still runs (here: started detached, as an orphan of a
    killed run would be) is stopped on the next start, said on stderr, and listed by doctor before."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    port = free_port()
    cmd = [sys.executable, str(stand_in), "--port", str(port)]
    orphan = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: is_healthy(f"http://127.0.0.1:{port}", timeout=2), "the orphan to answer", limit_s=60)
        # its run: another process, which recorded the server in the lease and died without cleaning up
        subprocess.run([sys.executable, "-c", "import sys; from soarlab.engines.port_lease import PortLease; "
                        f"PortLease({port}).write({orphan.pid}, sys.argv[1:], 'old.log')", *cmd], check=True)
        rows = leftovers.server_rows()
        assert rows[0][:2] == ("stale server", False) and f"pid {orphan.pid} on port {port}" in rows[0][2]
        assert f"Fix: kill -TERM -{orphan.pid}" in rows[0][2]

        monkeypatch.setattr(sglang_engine, "preflight", lambda cfg: None)
        monkeypatch.setattr(sglang_engine, "build_command",
                            lambda cfg, model_dir, host, p: [sys.executable, str(stand_in), "--port", str(p)])
        with open_engine(engine_cfg("sglang", port=port), fake_model(tmp_path), tmp_path / "new.log") as server:
            assert server.base_url.endswith(f":{port}")  # the port it freed, not a fallback
            assert orphan.poll() is not None  # stopped (and reaped here, as it is this test's child)
            assert PortLease(port).read().pid != orphan.pid
        said = capsys.readouterr().err
        assert f"stopped a stale server left by an earlier run: pid {orphan.pid} on port {port}" in said
        # doctor lists it no longer: neither as this state folder's stale server nor as an orphan. Other
        # orphans of the machine (another test's server in its last moments, a developer's own) may be listed.
        assert leftovers.stale_servers() == []
        assert not [row for row in leftovers.server_rows() if re.search(rf"\bpid {orphan.pid}\b", row[2])]
    finally:
        if orphan.poll() is None:
            orphan.kill()


def test_port_held_by_a_live_run_is_not_touched(tmp_path, state_dir, monkeypatch, capsys):
    """Two runs at once with one configured port: the second serves on a free port; the first's
    lease (a lock held by a live process) is never mistaken for a stale one."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    monkeypatch.setattr(sglang_engine, "preflight", lambda cfg: None)
    monkeypatch.setattr(sglang_engine, "build_command",
                        lambda cfg, model_dir, host, p: [sys.executable, str(stand_in), "--port", str(p)])
    port = free_port()
    cfg = engine_cfg("sglang", port=port)
    with open_engine(cfg, fake_model(tmp_path), tmp_path / "a.log") as first:
        with open_engine(cfg, fake_model(tmp_path), tmp_path / "b.log") as second:
            assert first.base_url.endswith(f":{port}") and not second.base_url.endswith(f":{port}")
            assert first.flush_cache(10) and second.flush_cache(10)
            assert leftovers.stale_servers() == []
    assert "stale" not in capsys.readouterr().err


def test_spawn_from_a_worker_thread_outlives_the_thread():
    """PR_SET_PDEATHSIG fires when the forking *thread* exits: a server forked by a worker thread
    that then ends must keep running (spawn forks through a thread that lives as long as the process)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        child = pool.submit(spawn, [sys.executable, "-c", "import time; time.sleep(600)"]).result()
    # the pool's thread has exited here
    try:
        time.sleep(0.5)
        assert child.poll() is None and pid_alive(child.pid)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_spawned_child_dies_with_its_parent_even_on_sigkill(tmp_path):
    """The parent-death signal on its own: a parent SIGKILLed (no cleanup code runs) takes its child along."""
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from soarlab.engines.process import spawn; "
        "c = spawn([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(600)")])
    child = int(wait_for(lambda: pidfile.is_file() and pidfile.read_text(), "the child's pid", limit_s=60))
    started = process_start_time(child)
    parent.kill()
    parent.wait()
    wait_for(lambda: process_start_time(child) != started, "the child to die with its parent", limit_s=30)


@pytest.mark.slow
@pytest.mark.e2e
def test_two_queued_experiments_with_the_default_port_both_succeed(tmp_path):
    """`dvc queue start -j 2` with engine.port left at its default: both evaluate stages serve at once, the
    second on a free port (issue 12, part 3). Real DVC, real `transformers serve`."""
    dest, env = make_project(tmp_path / "project")

    def run(*cmd: str) -> str:
        proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=1500)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    # No quantization and a short bench keep this short; the engine (and its port) is the default.
    cheap = ["quant=none", "eval.limit=4", "bench.dataset.num_requests=4", *QUICK_BENCH]
    run("soarlab", "params", *cheap)
    run("dvc", "repro", "evaluate")  # fetch, quantize and one evaluate: the cache both experiments start from
    run("git", "add", "-A")
    run("git", "commit", "-qm", "baseline")
    assert "port: 30000" in (dest / "params.yaml").read_text()
    for seed in (2, 3):  # the evaluate stage differs (the bench's request order), the port does not
        run("dvc", "exp", "run", "--queue", "evaluate", *(f"-S{o}" for o in cheap), "-S", f"bench.seed={seed}")
    run("dvc", "queue", "start", "-j", "2")
    try:
        status = wait_for(lambda: (lambda out: out if out.count("Success") + out.count("Failed") >= 2 else None)(
            run("dvc", "queue", "status")), "both experiments to finish", limit_s=1500, every_s=5)
    finally:
        subprocess.run(["dvc", "queue", "stop"], cwd=dest, env=env, capture_output=True, timeout=300)
    assert status.count("Success") == 2, status
    shown = json.loads(run("dvc", "exp", "show", "--json"))
    seeds = sorted(exp["data"]["params"]["params.yaml"]["data"]["bench"]["seed"]
                   for rev in shown for exp in (rev.get("experiments") or []) for exp in exp["revs"])
    assert seeds == [2, 3]


def test_orphaned_server_without_a_lease_is_stopped_when_its_port_is_wanted(tmp_path, state_dir, capsys):
    """A `transformers serve` of ours orphaned before leases existed (parent 1, no record): listed by
    doctor and stopped by the next start on its port. The stand-in runs under the launcher's module
    name (a shadowing `soarlab.engines.transformers_serve` on PYTHONPATH), as the real one would."""
    from soarlab.engines.port_lease import lease_port, orphan_servers

    fake = tmp_path / "old" / "soarlab" / "engines"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "transformers_serve.py").write_text(STAND_IN)
    port = free_port()
    # started and abandoned by a shell that exits at once: the server is reparented to init
    subprocess.run(["sh", "-c", f"PYTHONPATH={tmp_path / 'old'} setsid {sys.executable} -m soarlab.engines.transformers_serve "
                    f"--port {port} >/dev/null 2>&1 &"], check=True)
    orphan = wait_for(lambda: next((pid for pid, cmd in orphan_servers() if f"--port {port}" in cmd), None),
                      "the orphan to appear", limit_s=60)
    try:
        wait_for(lambda: is_healthy(f"http://127.0.0.1:{port}", timeout=2), "the orphan to answer", limit_s=60)
        assert any(f"pid {orphan}, orphaned (parent 1)" in detail for _, _, detail in leftovers.server_rows())
        lease = lease_port("127.0.0.1", port)
        try:
            assert lease.port == port and not port_in_use("127.0.0.1", port)
        finally:
            lease.release()
        assert f"stopped an orphaned SOAR Lab server on port {port}: pid {orphan}" in capsys.readouterr().err
        assert process_start_time(orphan) is None
    finally:
        if process_start_time(orphan) is not None:
            os.kill(orphan, signal.SIGKILL)
