"""Engines: real subprocesses, real HTTP on 127.0.0.1 with free ports.

SGLang itself is mocked here (it needs an NVIDIA GPU): its command building is checked as data,
and its start/health/flush/stop machinery runs against a small stand-in HTTP server process.
The transformers engine runs for real on the tiny model.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from soarlab.config import compose
from soarlab.engines import Server, open_engine
from soarlab.engines import sglang as sglang_engine
from soarlab.engines.process import managed_server
from soarlab.engines.server import free_port, http_request
from soarlab.errors import SoarError

from support import ROOT, STAND_IN, engine_cfg, fake_model, pid_alive


@pytest.fixture
def stand_in(tmp_path) -> Path:
    path = tmp_path / "stand_in.py"
    path.write_text(STAND_IN)
    return path


# --- SGLang command building (no GPU needed) ---------------------------------------------------------


def test_sglang_default_flags_are_the_image_defaults_plus_bf16_and_hyphenated():
    flags = sglang_engine.server_flags(engine_cfg("sglang").engine, None)
    assert flags == ["--disable-radix-cache", "--attention-backend", "minicpm_flashinfer",
                     "--chunked-prefill-size", "8192", "--skip-server-warmup", "--dense-as-sparse",
                     "--dtype", "bfloat16"]
    assert all("_" not in f for f in flags if f.startswith("--"))


def test_sglang_flags_true_false_null_underscores_and_quantization():
    cfg = engine_cfg("sglang", serve_quantization="gptq_marlin",
                     server_args={"dense_as_sparse": True, "disable-radix-cache": False, "kv-cache-dtype": None,
                                  "mem_fraction_static": 0.85, "cuda-graph-max-bs": 16})
    args = shlex.join(sglang_engine.server_flags(cfg.engine, cfg.quant.serve_quantization))  # as package renders it
    assert args == "--dense-as-sparse --mem-fraction-static 0.85 --cuda-graph-max-bs 16 --quantization gptq_marlin"
    # the same code renders the launch command and the SGLANG_SERVER_ARGS string; a local launch adds
    # --enable-metrics (engine.enable_metrics: bench samples GET /metrics), which no submission gets
    cmd = sglang_engine.build_command(cfg, Path("/m"), "127.0.0.1", 30000)
    assert cmd[0] == str(ROOT / ".venv-sglang" / "bin" / "python")  # SGLang's own environment (engine.python)
    assert cmd[1:7] == ["-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1"]
    assert cmd[9:] == shlex.split(args) + ["--enable-metrics"]
    cfg.engine.enable_metrics = False
    assert sglang_engine.build_command(cfg, Path("/m"), "127.0.0.1", 30000)[9:] == shlex.split(args)


def test_sglang_unquantized_has_no_quantization_flag_and_conflicts_are_errors():
    assert "--quantization" not in sglang_engine.server_flags(engine_cfg("sglang").engine, None)
    with pytest.raises(SoarError, match="twice"):
        sglang_engine.server_flags(engine_cfg("sglang", server_args={"dense-as-sparse": True, "dense_as_sparse": True}).engine, None)
    with pytest.raises(SoarError, match="launcher sets itself"):
        sglang_engine.server_flags(engine_cfg("sglang", server_args={"port": 1}).engine, None)
    with pytest.raises(SoarError, match="disagrees"):
        sglang_engine.server_flags(engine_cfg("sglang", server_args={"quantization": "gptq"}).engine, "awq")


def test_the_old_docker_launcher_is_refused_naming_the_choices():
    from soarlab.config import compose

    with pytest.raises(SoarError, match=r"engine.launcher.*'local' or 'container'.*got 'docker'"):
        compose(["engine=sglang", "engine.launcher=docker"], root=ROOT)


def test_sglang_container_mounts_the_jit_cache(tmp_path):
    args = sglang_engine.jit_container_args(engine_cfg("sglang", jit_cache_dir=str(tmp_path / "jit")))
    mounts = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    assert mounts == [f"{tmp_path / 'jit'}:/soarlab-jit-cache"] and (tmp_path / "jit").is_dir()
    env = [args[i + 1] for i, a in enumerate(args) if a == "-e"]
    assert sorted(env) == ["FLASHINFER_WORKSPACE_BASE=/soarlab-jit-cache/flashinfer",
                           "TORCHINDUCTOR_CACHE_DIR=/soarlab-jit-cache/inductor",
                           "TRITON_CACHE_DIR=/soarlab-jit-cache/triton", "TVM_FFI_CACHE_DIR=/soarlab-jit-cache/tvm-ffi"]
    assert sglang_engine.jit_container_args(engine_cfg("sglang", jit_cache_dir=None)) == []


def test_sglang_without_sglang_installed_says_how_to_fix(tmp_path, monkeypatch):
    missing = str(tmp_path / "no-env" / "bin" / "python")
    with pytest.raises(SoarError, match=r"engine.python .*no-env/bin/python does not exist.*bash scripts/setup.sh --gpu"):
        with open_engine(engine_cfg("sglang", port=free_port(), python=missing), fake_model(tmp_path), tmp_path / "log"):
            pass
    monkeypatch.setattr(sglang_engine.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SoarError, match=r"sglang is not installed in this Python \(engine.python=null\)"):
        with open_engine(engine_cfg("sglang", port=free_port(), python=None), fake_model(tmp_path), tmp_path / "log"):
            pass


# --- start / health / flush / stop, against the stand-in ----------------------------------------------


def test_sglang_machinery_with_stand_in(tmp_path, monkeypatch, stand_in, capsys):
    """SGLang mocked (needs a GPU): open_sglang runs a stand-in process instead of sglang.launch_server."""
    port = free_port()
    monkeypatch.setattr(sglang_engine, "preflight", lambda cfg: None)
    monkeypatch.setattr(sglang_engine, "build_command",
                        lambda cfg, model_dir, host, p: [sys.executable, str(stand_in), "--port", str(p), "--delay", "0.5"])
    log = tmp_path / "logs" / "server.log"
    jit = tmp_path / "jit"
    with open_engine(engine_cfg("sglang", port=port, jit_cache_dir=str(jit)), fake_model(tmp_path), log) as server:
        assert isinstance(server, Server)
        assert server.base_url == f"http://127.0.0.1:{port}"
        assert (server.api, server.supports_ignore_eos) == ("sglang", True)
        assert server.flush_cache(10) is True
        pid = _stand_in_pid(log)
        assert pid_alive(pid)
    assert not pid_alive(pid)
    # the start's time is said (minutes on a GPU): the stand-in waits 0.5 s before it answers
    ready = re.search(r"^sglang server ready in ([0-9.]+) s at http://127\.0\.0\.1:(\d+)$", capsys.readouterr().out, re.M)
    assert ready and float(ready[1]) >= 0.5 and int(ready[2]) == port
    assert "stand-in starting" in log.read_text() and "/flush_cache" in log.read_text()
    # engine.jit_cache_dir reaches the server's environment, one folder per JIT compiler
    assert f"jit caches {jit}/tvm-ffi {jit}/triton {jit}/flashinfer" in log.read_text() and jit.is_dir()
    # a folder the caller already chose (a sweep trial's, per GPU) wins over engine.jit_cache_dir
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "trial-triton"))
    with open_engine(engine_cfg("sglang", port=port, jit_cache_dir=str(jit)), fake_model(tmp_path), log):
        pass
    assert f"jit caches {jit}/tvm-ffi {tmp_path / 'trial-triton'} {jit}/flashinfer" in log.read_text()


def _stand_in_pid(log: Path) -> int:
    line = next(line for line in log.read_text().splitlines() if line.startswith("stand-in starting"))
    return int(line.split()[-1])


def test_stopped_on_exception_and_keyboard_interrupt(tmp_path, stand_in):
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        port = free_port()
        with pytest.raises(type(exc)):
            with managed_server([sys.executable, str(stand_in), "--port", str(port)], base_url=f"http://127.0.0.1:{port}",
                                log_path=tmp_path / "log", startup_timeout_s=30) as proc:
                raise exc
        assert proc.poll() is not None and not pid_alive(proc.pid)


def test_sigterm_ignoring_server_is_killed_after_grace(tmp_path, stand_in):
    port = free_port()
    log = tmp_path / "log"
    t0 = time.monotonic()
    with managed_server([sys.executable, str(stand_in), "--port", str(port), "--ignore-term"],
                        base_url=f"http://127.0.0.1:{port}", log_path=log, startup_timeout_s=30, stop_grace_s=1) as proc:
        pid = _stand_in_pid(log)
    assert proc.poll() == -signal.SIGKILL and not pid_alive(pid)
    assert time.monotonic() - t0 < 20


def test_crash_at_startup_names_log_and_last_lines(tmp_path, stand_in):
    port = free_port()
    log = tmp_path / "server.log"
    with pytest.raises(SoarError) as info:
        with managed_server([sys.executable, str(stand_in), "--port", str(port), "--crash"],
                            base_url=f"http://127.0.0.1:{port}", log_path=log, startup_timeout_s=30):
            pass
    msg = str(info.value)
    assert "exited with code 3" in msg and str(log) in msg and "no kernel image" in msg


def test_startup_timeout_names_log_and_stops_process(tmp_path, stand_in):
    port = free_port()
    with pytest.raises(SoarError, match="not healthy .* after 1s") as info:
        with managed_server([sys.executable, str(stand_in), "--port", str(port), "--delay", "30"],
                            base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "log", startup_timeout_s=1):
            pass
    assert "stand-in starting" in str(info.value)
    assert not _stand_in_running(port)


def _stand_in_running(port: int) -> bool:
    import subprocess

    return subprocess.run(["pgrep", "-f", f"stand_in.py --port {port}"], capture_output=True).returncode == 0


def test_port_in_use_gets_a_free_port_and_says_so(tmp_path, stand_in, monkeypatch, capsys):
    """Parallel runs are safe by default (issue 12): a taken engine.port is not an error, the run
    serves on a free port and says which and why."""
    port = free_port()
    monkeypatch.setattr(sglang_engine, "preflight", lambda cfg: None)
    monkeypatch.setattr(sglang_engine, "build_command",
                        lambda cfg, model_dir, host, p: [sys.executable, str(stand_in), "--port", str(p)])
    with managed_server([sys.executable, str(stand_in), "--port", str(port)], base_url=f"http://127.0.0.1:{port}",
                        log_path=tmp_path / "a.log", startup_timeout_s=30) as first:
        with open_engine(engine_cfg("sglang", port=port), fake_model(tmp_path), tmp_path / "b.log") as server:
            second = int(server.base_url.rsplit(":", 1)[1])
            assert second != port and server.flush_cache(10) is True
        said = capsys.readouterr().err
        assert f"port {port} is taken (pid {first.pid})" in said and f"free port {second}" in said


# --- external ----------------------------------------------------------------------------------------


def test_external_reachable_and_unreachable(tmp_path, stand_in, capsys):
    port = free_port()
    with managed_server([sys.executable, str(stand_in), "--port", str(port)], base_url=f"http://127.0.0.1:{port}",
                        log_path=tmp_path / "log", startup_timeout_s=30) as proc:
        cfg = engine_cfg("external", url=f"http://127.0.0.1:{port}/", model="m")
        with open_engine(cfg, tmp_path, tmp_path / "unused.log") as server:
            assert (server.base_url, server.api, server.model) == (f"http://127.0.0.1:{port}", "sglang", "m")
            assert server.supports_ignore_eos and server.flush_cache(10)
        assert proc.poll() is None  # external: nothing stopped
    assert "server ready" not in capsys.readouterr().out  # nor timed: it was not started here
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SoarError, match=f"server at {dead} not reachable.*Fix: start it or set engine.url"):
        with open_engine(engine_cfg("external", url=dead), tmp_path, tmp_path / "unused.log"):
            pass


def test_unknown_engine_is_refused_by_the_schema():
    """open_engine dispatches on the engine's type: a name no engine has never gets that far."""
    with pytest.raises(SoarError, match="config key engine .*'vllm'.*'transformers', 'sglang', 'external'"):
        compose(["engine.name=vllm"], root=ROOT)


# --- transformers serve, for real, on the tiny model -------------------------------------------------


def _post(url: str, body: dict, timeout: float = 120) -> tuple[int, str]:
    return http_request(url, method="POST", body=body, timeout=timeout)


def _stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    chunks = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp:
            line = line.decode().strip()
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                chunks.append(json.loads(line[5:]))
    return chunks


def server_environ(port: str) -> dict[str, str]:
    """The environment of this machine's `transformers serve` process on `port` (read from /proc)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
            if b"soarlab.engines.transformers_serve" in args and port.encode() in args:
                raw = (cmdline.parent / "environ").read_bytes()
                return dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if item)
        except OSError:  # a process that ended while we looked
            continue
    raise AssertionError(f"no transformers serve process on port {port}")


def test_transformers_serves_tiny_model(tiny_model_dir, tmp_path):
    log = tmp_path / "serve.log"
    cfg = engine_cfg("transformers", port=0, startup_timeout_s=180, cpu_threads=2)  # not conftest's 1 a worker
    with open_engine(cfg, tiny_model_dir, log) as server:
        assert (server.api, server.supports_ignore_eos) == ("openai", False)
        assert server.model == str(Path(tiny_model_dir).resolve())
        assert server.flush_cache(10) is False
        base = server.base_url
        # exact output length without ignore_eos: a per-request generation_config JSON string
        n = 12
        gen = json.dumps({"min_new_tokens": n, "max_new_tokens": n})
        status, text = _post(f"{base}/v1/completions", {"model": server.model, "prompt": "Hello", "generation_config": gen})
        assert status == 200, text
        assert json.loads(text)["usage"]["completion_tokens"] == n
        chunks = _stream(f"{base}/v1/completions",
                         {"model": server.model, "prompt": "The cat", "max_tokens": n, "generation_config": gen})
        assert chunks[-1]["usage"]["completion_tokens"] == n
        chat = _stream(f"{base}/v1/chat/completions", {"model": server.model, "max_tokens": 4,
                                                        "messages": [{"role": "user", "content": "Hi"}]})
        assert chat and chat[-1]["choices"][0]["finish_reason"] in ("length", "stop")
        # unknown fields are rejected: why supports_ignore_eos is False
        status, _ = _post(f"{base}/v1/completions", {"model": server.model, "prompt": "x", "ignore_eos": True})
        assert status == 422
        # torch's thread count is engine.cpu_threads
        assert server_environ(base.rsplit(":", 1)[1])["OMP_NUM_THREADS"] == "2"
    assert http_request(f"{base}/health", timeout=2)[0] is None  # stopped
    assert "Uvicorn running" in log.read_text()
