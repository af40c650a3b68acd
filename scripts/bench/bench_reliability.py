"""Measure what issues 12 and 21 ask (docs/PERFORMANCE.md, "Reliability"):

1. the time from a signal to a running `soarlab stage bench` (real `transformers serve` on the tiny
   model, engine.port=0) until its server's port is free: SIGKILL (the kernel's parent-death
   signal) and SIGTERM (the stage's own cleanup); and the same from a signal to `dvc` alone, which
   runs that stage through $SHELL -c (bash execs the stage; dash waits for it);
2. the time to give up on a hung server (accepts connections, never answers): one level of 12
   requests, with bench.level_timeout_s against the old behaviour (every request waits out
   bench.request_timeout_s in turn);
3. the start probe of `soarlab bench --url` against the same silent socket, bounded by
   bench.connect_timeout_s.

    .venv/bin/python scripts/bench/bench_reliability.py [--repeats 3] [--parts kill,dvc,hung,probe]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def kill_to_port_free(root: Path, state: Path, sig: int, shell: str | None = None) -> float:
    """Signal `soarlab stage bench` (shell None), or the `dvc repro` that runs it with SHELL=shell."""
    from support import wait_for

    from soarlab.engines.port_lease import process_start_time
    from soarlab.engines.server import is_healthy, port_in_use

    shutil.rmtree(state, ignore_errors=True)
    env = {**os.environ, "SOARLAB_STATE_DIR": str(state), "SHELL": shell or os.environ.get("SHELL", "/bin/sh"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = ["dvc", "repro"] if shell else [sys.executable, "-m", "soarlab.cli", "stage", "bench"]
    target = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    record = {}
    try:
        record = wait_for(lambda: next((json.loads(p.read_text()) for p in (state / "ports").glob("*.json")), None)
                          if (state / "ports").is_dir() else None, "the server", 300, 0.2)
        wait_for(lambda: is_healthy(f"http://127.0.0.1:{record['port']}", timeout=2), "the server", 300, 0.2)
        t0 = time.perf_counter()
        target.send_signal(sig)
        wait_for(lambda: not port_in_use("127.0.0.1", record["port"]), "the port to be free", 120, 0.01)
        return time.perf_counter() - t0
    finally:
        if target.poll() is None:
            target.kill()
        target.wait()
        stage = record.get("owner_pid")
        if stage and process_start_time(stage) is not None:  # a stage that outlived its dvc
            os.kill(stage, signal.SIGKILL)


def give_up_on_hung_server(level_timeout_s, request_timeout_s) -> float:
    from support import SilentServer, bench_cfg

    from soarlab.bench.requests import BenchRequest
    from soarlab.bench.runner import run_level
    from soarlab.engines.server import Server

    server = SilentServer()
    try:
        requests = [BenchRequest(index=i, line=i + 1, prompt="hello " * 5, prompt_len=6, output_len=8) for i in range(12)]
        bench = bench_cfg(request_timeout_s=request_timeout_s, level_timeout_s=level_timeout_s, warmup_requests=0,
                          flush_cache=False)
        t0 = time.perf_counter()
        report, _ = run_level(Server(f"http://127.0.0.1:{server.port}", "openai", model="m"), requests, "S1", 1, bench)
        assert not report.valid
        return time.perf_counter() - t0
    finally:
        server.close()


def start_probe(timeout_s: float, old: bool = False) -> float:
    """`soarlab bench --url`'s first probe against a silent socket, in this process (no start-up cost).
    old: what it did before, each of its three endpoints asked with a fixed 10 s timeout."""
    from support import SilentServer

    from soarlab.bench.preflight import reachable
    from soarlab.engines.server import http_request

    server = SilentServer()
    url = f"http://127.0.0.1:{server.port}"
    try:
        t0 = time.perf_counter()
        if old:
            any(http_request(url + path, timeout=10)[0] is not None for path in ("/health", "/v1/models", "/get_model_info"))
        else:
            reachable(url, timeout_s)
        return time.perf_counter() - t0
    finally:
        server.close()


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="kill,dvc,hung,probe", help="which measurements (comma-separated)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "kill" in parts or "dvc" in parts:
        from support import bench_project, dvc_bench_project

        from soarlab.tiny import install_tiny_model

        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            model = install_tiny_model(tmp / "model")
            if "kill" in parts:
                root = bench_project(tmp / "proj", model)
                for sig in (signal.SIGKILL, signal.SIGTERM):
                    times = [kill_to_port_free(root, tmp / "state", sig) for _ in range(args.repeats)]
                    print(f"{signal.Signals(sig).name} of `soarlab stage bench` -> port free: {summary(times)}", flush=True)
            if "dvc" in parts:
                root = dvc_bench_project(tmp / "dvc-proj", model)
                for shell in ("/bin/bash", "/bin/dash"):
                    for sig in (signal.SIGKILL, signal.SIGTERM):
                        times = [kill_to_port_free(root, tmp / "state", sig, shell) for _ in range(args.repeats)]
                        print(f"{signal.Signals(sig).name} of `dvc repro` alone (SHELL={shell}) -> port free: "
                              f"{summary(times)}", flush=True)
    if "hung" in parts:
        for level_timeout_s, request_timeout_s, label in (
                (None, 2, "no level bound, request_timeout_s=2 (the old behaviour)"),
                (5, 3600, "level_timeout_s=5, request_timeout_s=3600")):
            times = [give_up_on_hung_server(level_timeout_s, request_timeout_s) for _ in range(args.repeats)]
            print(f"hung server, 12 requests at S1, {label}: given up after {summary(times)}", flush=True)
    if "probe" in parts:
        for timeout_s in (2, 5):
            times = [start_probe(timeout_s) for _ in range(args.repeats)]
            print(f"start probe of a silent socket, bench.connect_timeout_s={timeout_s}: {summary(times)}", flush=True)
        print(f"start probe of a silent socket, before (3 endpoints x 10 s): {summary([start_probe(0, old=True)])}")


if __name__ == "__main__":
    main()
