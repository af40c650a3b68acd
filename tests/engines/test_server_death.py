"""A server that dies is reported as dead, and a pipeline that measured nothing fails.

The real `transformers serve` on the tiny model, killed with SIGKILL in the middle of a level (what the
kernel's OOM killer sends); score and track on reports whose every level is invalid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from soarlab.atomic import write_json
from soarlab.config import to_yaml
from soarlab.engines.server import describe_exit, is_healthy

from support import bench_project, served_record, soarlab_in, wait_for

ERROR = "soarlab: error: "


def test_exit_status_in_words():
    assert describe_exit(-signal.SIGKILL) == "the server exited (signal 9, likely out of memory)"
    assert describe_exit(137) == "the server exited (signal 9, likely out of memory)"  # a container CLI's 128 + 9
    assert describe_exit(-signal.SIGSEGV) == "the server exited (signal 11, SIGSEGV)"
    assert describe_exit(3) == "the server exited with code 3"


@pytest.mark.slow
def test_server_killed_mid_level_is_reported_dead_and_the_stage_fails(tiny_model_dir, tmp_path, state_dir):
    root = bench_project(tmp_path / "proj", tiny_model_dir)
    out_file = tmp_path / "stage.out"
    with open(out_file, "w") as out_fh:  # a file, read while it runs: the stage says when its server is ready
        stage = subprocess.Popen([sys.executable, "-m", "soarlab.cli", "stage", "bench"], cwd=root,
                                 stdout=out_fh, stderr=subprocess.PIPE, text=True)
    try:
        record = wait_for(lambda: served_record(state_dir), "the server's lease record")
        wait_for(lambda: "server ready" in out_file.read_text(), "the stage to start its first level")
        assert stage.poll() is None and is_healthy(f"http://127.0.0.1:{record['port']}", timeout=2)
        os.kill(record["pid"], signal.SIGKILL)  # as the OOM killer does
        _, err = stage.communicate(timeout=300)
    finally:
        if stage.poll() is None:
            stage.kill()
    out = out_file.read_text()
    lines = err.strip().splitlines()
    assert stage.returncode == 2, err
    assert lines[-1].startswith(ERROR + "the server exited (signal 9, likely out of memory) during bench level S1. Fix: read the end of reports/logs/bench-server.log"), err
    assert "bench-server.log" in lines[-1] and len(lines[-1]) <= 200
    assert "bench S8" not in out, "the levels after the dead server's are not run"
    assert not (root / "reports" / "bench").exists(), "a failed stage writes no outputs"


def _all_invalid(root):
    levels = ("S1", "S8", "Smax")
    write_json(root / "reports" / "bench" / "metrics.json",
               {**{f"{lv}_duration_s": None for lv in levels}, **{f"{lv}_valid": 0 for lv in levels}})


def test_every_level_invalid_fails_score_and_track_logs_nothing(project_with_accuracy):
    root, cfg = project_with_accuracy
    (root / "params.yaml").write_text(to_yaml(cfg))
    _all_invalid(root)
    env = {**os.environ}
    proj = (root, env)
    score = soarlab_in(proj, ["stage", "score"], ok=(2,))
    assert score.stderr.strip().splitlines()[-1].startswith(ERROR + "every bench level is invalid")
    assert json.loads((root / "reports" / "score.json").read_text())["final"] is None
    track = soarlab_in(proj, ["stage", "track"], ok=(2,))
    assert track.stderr.strip().splitlines()[-1].startswith(ERROR + f"{root / 'reports' / 'score.json'} says every")
    assert not (root / "mlflow.db").exists(), "no run logged, no store made"
