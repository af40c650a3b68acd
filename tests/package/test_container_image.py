"""The CPU serving image, built and run for real with Podman (RULES.md 4 flow in a container).

From a clean state: a Debian base made with mmdebstrap under a tag of this test's own, then the
image on it. The container unpacks the submission, sources prepare_env.sh, quantizes the tiny model
mounted read-only where the platform mounts it, and serves it with `transformers serve`; bench's S1
level and a few correctness rows run against it, every bench request returning exactly its asked
token count. Afterwards no container and no listener of ours is left. Podman is installed (apt-get,
as root) when missing; the test is skipped, with the reason, only where that is impossible.
Takes a few minutes (the base image about 1-2, the build about 3).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from soarlab.errors import SoarError

from support import ROOT

TOOLS = ("podman", "runc", "mmdebstrap")

pytestmark = [pytest.mark.slow, pytest.mark.container]


def ensure_podman() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{', '.join(missing)} missing and cannot be installed here (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing])
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            pytest.skip(f"installing {', '.join(missing)} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")


def test_cpu_image_from_clean_state_serves_bench_and_correctness(source_project, tiny_model_dir, tiny_tokenizer):
    from soarlab.bench.preflight import prepare
    from soarlab.bench.runner import run_level
    from soarlab.config import compose
    from soarlab.container import container_tool
    from soarlab.datasets.speed import make_speed_set, named_profile
    from soarlab.engines import open_engine
    from soarlab.engines.server import port_in_use
    from soarlab.stages import accuracy, package

    ensure_podman()
    run_id = uuid.uuid4().hex[:10]
    base, tag = f"localhost/soarlab-test-base:{run_id}", f"localhost/soarlab-test-cpu:{run_id}"
    overrides = [
        "engine.port=0", "package.build_image=true", "package.container_cli=podman",
        f"package.cpu_image.base={base}", f"package.cpu_image.tag={tag}", f"paths.base_model={tiny_model_dir}",
        "bench.levels={S1:1}", "bench.progress=false", "bench.plot=false", "eval.limit=2", "eval.num_concurrent=1",
    ]
    # package builds only (its timed start with engine.launcher=container is left to the pipeline: one
    # container start fewer in CI); then the container serves, started the way bench and accuracy start it
    cfg = compose(overrides, root=source_project)
    serve_cfg = compose([*overrides, "engine.launcher=container"], root=source_project)
    cli = container_tool("podman")
    assert not cli.image_exists(base) and not cli.image_exists(tag)  # clean state
    try:
        out = package.run(cfg)  # the base image, then the image
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["image_built"] == 1 and metrics["image_bytes"] > 10**8 and metrics["build_s"] > 0
        assert cli.image_exists(base) and cli.image_exists(tag)

        speed = source_project / "speed.jsonl"
        speed.write_text("".join(json.dumps(r) + "\n" for r in make_speed_set(tiny_tokenizer, named_profile(cfg.bench.profiles, "tiny"), 3, seed=1)))
        requests, info = prepare(speed, tiny_tokenizer, cfg.bench)
        correctness = ROOT / "src" / "soarlab" / "datasets" / "embedded" / "correctness.jsonl"
        with open_engine(serve_cfg, tiny_model_dir, source_project / "serve.log") as server:
            name = f"soarlab-transformers-{server.base_url.rsplit(':', 1)[1]}"
            assert cli.containers(name)
            # the original model is mounted read-only
            probe = cli.run(["exec", name, "touch", "/models/MiniCPM-SALA/x"])
            assert probe.returncode != 0 and "Read-only" in probe.stderr
            # torch's thread count in the container is engine.cpu_threads, as in a local server
            threads = cli.run(["exec", name, "printenv", "OMP_NUM_THREADS"]).stdout.strip()
            assert threads == str(serve_cfg.engine.cpu_threads), threads
            report, rows = run_level(server, requests, "S1", 1, cfg.bench, tiny_tokenizer, info)
            summary, records = accuracy.evaluate(server, correctness, tiny_model_dir, cfg)
        assert report.valid, report.invalid_reasons
        assert len(rows) == len(requests) * cfg.bench.repeats and all(r["error"] is None for r in rows)  # one row per request and repeat
        # the server's count (usage) is the truth; re-tokenizing the streamed text on the client may differ
        assert all(r["server_output_tokens"] == r["output_tokens_asked"] for r in rows)
        assert len(records) == 2 and all(not r["failed"] and isinstance(r["prediction"], str) for r in records)
        assert summary["server"]["base_url"] == server.base_url
        # stopped: no container left, nothing listening where it served
        assert cli.containers(name) == []
        assert not port_in_use("127.0.0.1", int(server.base_url.rsplit(":", 1)[1]))
        log = (source_project / "serve.log").read_text()
        for step in ("unpacking /submission.tar.gz", "prepare_env.sh: uv pip install", "Checked ",
                     "prepare_model.sh --input /models/MiniCPM-SALA", "starting transformers on 127.0.0.1:"):
            assert step in log, step
    finally:
        cli.run(["rmi", "-f", tag], timeout=300)
        cli.run(["rmi", "-f", base], timeout=300)


def test_container_launcher_refuses_a_missing_image(source_project, tiny_model_dir):
    from soarlab.config import compose
    from soarlab.engines import open_engine

    ensure_podman()
    cfg = compose(["engine.launcher=container", "engine.port=0", "package.container_cli=podman",
                   "package.cpu_image.tag=localhost/soarlab-test-never-built:1", f"paths.base_model={tiny_model_dir}"],
                  root=source_project)
    with pytest.raises(SoarError, match="is not built"):
        with open_engine(cfg, tiny_model_dir, source_project / "serve.log"):
            pass
