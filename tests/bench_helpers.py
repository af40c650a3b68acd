"""Helpers for the bench tests: the bench config (conf/bench/tiny.yaml over soar.yaml) and small speed sets."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from soarlab.schema import BenchGroup

from conftest import QUICK_BENCH_FIELDS

ROOT = Path(__file__).resolve().parents[1]


def bench_cfg(**changes) -> BenchGroup:
    """conf/bench/tiny.yaml as compose types it (it extends soar.yaml), with test-friendly changes (merged deep)."""
    from soarlab.config import compose, plain

    # One timed run per level unless a test asks for repeats (the tiny default runs 3).
    test_friendly = {**QUICK_BENCH_FIELDS, "progress": False, "request_timeout_s": 20.0}
    merged = OmegaConf.merge(plain(compose(["bench=tiny"], root=ROOT).bench), test_friendly, changes)
    return BenchGroup.model_validate(OmegaConf.to_container(merged))


def write_set(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class SilentServer:
    """A hung server: accepts connections on 127.0.0.1 and never answers."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for conn in self.conns:
            conn.close()


def bench_project(root: Path, model_dir: Path) -> Path:
    """A project whose `soarlab stage bench` serves `model_dir` on any free port, with a speed set long
    enough to still be running when it is killed."""
    import shutil

    from soarlab.config import compose, to_yaml

    shutil.copytree(ROOT / "conf", root / "conf")
    (root / "data").mkdir()
    rows = [{"question": f"question {i} " + "word " * 40, "model_response": "answer " * 60} for i in range(200)]
    (root / "data" / "speed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose([f"paths.quantized_model={model_dir}", f"paths.data={root / 'data'}", f"paths.reports={root / 'reports'}",
                   "engine.port=0", "bench.progress=false"], root=root)
    (root / "params.yaml").write_text(to_yaml(cfg))
    return root


def wait_for(condition, what: str, limit_s: float = 300.0, every_s: float = 0.2):
    """Poll `condition` until it is truthy (a bound against hanging, not a timing assertion)."""
    import time

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"gave up waiting for {what} after {limit_s:g} s")


def dvc_bench_project(root: Path, model_dir: Path) -> Path:
    """bench_project as a DVC project (no git) whose one stage, `bench`, is `soarlab stage bench`:
    what `dvc repro` runs, for killing `dvc` alone."""
    import subprocess
    import sys

    dvc = str(Path(sys.executable).parent / "dvc")
    bench_project(root, model_dir)
    (root / "dvc.yaml").write_text("stages:\n  bench:\n    cmd: soarlab stage bench\n    outs:\n      - reports/bench\n")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, check=True)
    subprocess.run([dvc, "config", "core.analytics", "false"], cwd=root, check=True)
    return root
