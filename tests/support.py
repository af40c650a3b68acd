"""What tests share besides fixtures (those are in conftest.py): the repository's root, copies of the
project, running `soarlab`/`dvc` in a copy, the bench's test config and servers that misbehave, the
stand-in for SGLang's server, typed configs of a group, and the import graph of src/. `import support`
works from any folder under tests/ (pyproject.toml puts tests/ on the path)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soarlab.schema import BenchGroup, QuantGroup, SoarConfig

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


# --- copies of the project ---------------------------------------------------------------------------


def copy_conf(dest: Path) -> Path:
    """This project's conf/ copied to `dest`/conf (which makes `dest` a project root); returns `dest`."""
    shutil.copytree(ROOT / "conf", dest / "conf")
    return dest


def make_project(dest: Path) -> tuple[Path, dict[str, str]]:
    """A git repo at `dest` holding this project's tracked and untracked-but-not-ignored files (what a
    fresh clone plus local edits would hold), and the environment to run `dvc`/`soarlab` in it."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
    }
    env.pop("DVC_ROOT", None)
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True)
    return dest, env


def make_fresh_project(dest: Path) -> tuple[Path, dict[str, str]]:
    """make_project without outputs: the committed dvc.lock names outputs made on another machine, which
    this copy's DVC cache does not hold (a user would `dvc pull` or `dvc repro` them first; `soarlab
    sweep` refuses to start on them and says so)."""
    dest, env = make_project(dest)
    subprocess.run(["git", "rm", "-q", "dvc.lock"], cwd=dest, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", "no outputs yet"], cwd=dest, env=env, check=True)
    return dest, env


# --- running commands in a copy -------------------------------------------------------------------------

# For tests about something other than the bench's figures: one timed run per level and no pause after
# the cache flush (the tiny default runs 3 repeats and pauses 1 s, as the official tool does).
QUICK_BENCH_FIELDS = {"repeats": 1, "pause_after_flush_s": 0.0}
QUICK_BENCH = [f"bench.{key}={value}" for key, value in QUICK_BENCH_FIELDS.items()]  # as Hydra overrides

# A pipeline served by a loopback server (soarlab.bench.loopback, given with -S engine.url=...): the served
# answers are the loopback's, so the tiny model is neither quantized nor served (CPU time).
LOOPBACK_PIPELINE = ["-S", "quant=none", "-S", "engine=external",
                     "-S", "bench.pause_after_flush_s=0", "-S", "eval.retries=0"]


def run_in(project: tuple[Path, dict[str, str]], cmd: list[str], ok=(0,), timeout: float = 1500) -> subprocess.CompletedProcess:
    """`cmd` in a make_project project; its exit code must be one of `ok`."""
    dest, env = project
    proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    return _exit_in(proc, ok)


def soarlab_in(project: tuple[Path, dict[str, str]], args: list[str], ok=(0,)) -> subprocess.CompletedProcess:
    """`soarlab ARGS` in a make_project project, through the CLI's entry point (soarlab.cli.main) in this
    process: for tests of a command's output and exit code, which a process per call would make pay for
    MLflow's import each time (about 2 CPU s). What main() changes for its process is put back after it:
    the environment and working directory (the project's during the call), the signal handlers
    soarlab.stopping installs, and MLflow's tracking URI."""
    import contextlib
    import io
    import signal

    import mlflow

    from soarlab import stopping
    from soarlab.cli import main

    dest, env = project
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_handlers = {signum: signal.getsignal(signum) for signum in stopping.SIGNALS}
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(dest)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
    finally:
        os.chdir(saved_cwd)
        mlflow.set_tracking_uri(saved_env.get("MLFLOW_TRACKING_URI"))  # MLflow keeps it in that variable; None unsets
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
    return _exit_in(subprocess.CompletedProcess(["soarlab", *args], code, out.getvalue(), err.getvalue()), ok)


def _exit_in(proc: subprocess.CompletedProcess, ok) -> subprocess.CompletedProcess:
    assert proc.returncode in ok, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def sweep(project: tuple[Path, dict[str, str]], *args: str, check: bool = True) -> str:
    """`soarlab sweep ARGS` in a make_project project: its output (it must succeed where `check`)."""
    dest, env = project
    proc = subprocess.run(["soarlab", "sweep", *args], cwd=dest, env=env, capture_output=True, text=True, timeout=3000)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 or not check, out[-4000:]
    return out


def children(dest: Path, name: str, uri: str | None = None):
    """The parent run of sweep `name` and its child runs, from the project's MLflow store (or `uri`)."""
    import mlflow

    client = mlflow.MlflowClient(uri or f"sqlite:///{dest / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("soarlab")
    parents = client.search_runs([experiment.experiment_id],
                                 filter_string=f"tags.`soarlab.sweep` = '{name}' and tags.`soarlab.role` = 'sweep'")
    assert len(parents) == 1, f"one parent run per sweep, got {len(parents)}"
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'")
    return parents[0], runs


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


# --- typed configs of one group ----------------------------------------------------------------------


def bench_cfg(**changes) -> BenchGroup:
    """conf/bench/tiny.yaml as compose types it (it extends soar.yaml), with test-friendly changes (merged deep)."""
    from omegaconf import OmegaConf

    from soarlab.config import compose, plain
    from soarlab.schema import BenchGroup

    # One timed run per level unless a test asks for repeats (the tiny default runs 3).
    test_friendly = {**QUICK_BENCH_FIELDS, "progress": False, "request_timeout_s": 20.0}
    merged = OmegaConf.merge(plain(compose(["bench=tiny"], root=ROOT).bench), test_friendly, changes)
    return BenchGroup.model_validate(OmegaConf.to_container(merged))


def engine_cfg(name: str, serve_quantization: str | None = None, **engine_changes) -> SoarConfig:
    """The composed config with conf/engine/`name`.yaml and `engine_changes` (typed by the schema, as a stage
    gets it), served with `serve_quantization`."""
    from soarlab.config import compose, plain

    cfg = compose([f"engine={name}"], root=ROOT)
    engine = type(cfg.engine).model_validate({**plain(cfg.engine), **engine_changes})
    quant = cfg.quant.model_copy(update={"serve_quantization": serve_quantization})
    return cfg.model_copy(update={"engine": engine, "quant": quant})


def qcfg(preset="gptq_w4", **changes) -> QuantGroup:
    """The preset as compose types it, with top-level `changes` (typed by the schema too)."""
    from soarlab.config import compose, plain
    from soarlab.schema import QuantGroup

    return QuantGroup.model_validate({**plain(compose([f"quant={preset}"]).quant), **changes})


def package_cfg(engine: str = "transformers", build_image=False, quant=None, **package_changes) -> SoarConfig:
    """The composed config (as params.yaml holds it); the default quant preset renamed gptq_w4_test, then
    `quant` and `package_changes` on it (typed by the schema, as a stage gets them)."""
    from soarlab.config import compose, plain
    from soarlab.schema import PackageGroup, QuantGroup

    cfg = compose([f"engine={engine}"], root=ROOT)
    quant = QuantGroup.model_validate({**plain(cfg.quant), "name": "gptq_w4_test", **(quant or {})})
    package = PackageGroup.model_validate({**plain(cfg.package), "build_image": build_image, **package_changes})
    return cfg.model_copy(update={"quant": quant, "package": package})


# --- bench: speed sets, projects and servers -----------------------------------------------------------


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
    from soarlab.config import compose, to_yaml

    copy_conf(root)
    (root / "data").mkdir()
    rows = [{"question": f"question {i} " + "word " * 40, "model_response": "answer " * 60} for i in range(200)]
    (root / "data" / "speed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose([f"paths.quantized_model={model_dir}", f"paths.data={root / 'data'}", f"paths.reports={root / 'reports'}",
                   "engine.port=0", "bench.progress=false"], root=root)
    (root / "params.yaml").write_text(to_yaml(cfg))
    return root


def dvc_bench_project(root: Path, model_dir: Path) -> Path:
    """bench_project as a DVC project (no git) whose one stage, `bench`, is `soarlab stage bench`:
    what `dvc repro` runs, for killing `dvc` alone."""
    from soarlab.names.environment import DVC_NO_ANALYTICS_ENV

    dvc = str(Path(sys.executable).parent / "dvc")
    bench_project(root, model_dir)
    (root / "dvc.yaml").write_text("stages:\n  bench:\n    cmd: soarlab stage bench\n    outs:\n      - reports/bench\n")
    quiet = {**os.environ, DVC_NO_ANALYTICS_ENV: "1"}  # `dvc init` would leave a usage report it cannot send offline
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, env=quiet, check=True)
    subprocess.run([dvc, "config", "core.analytics", "false"], cwd=root, env=quiet, check=True)
    return root


# --- engines: SGLang's stand-in and server processes ------------------------------------------------------

STAND_IN = textwrap.dedent(
    """
    # Stand-in for `python -m sglang.launch_server` (SGLang needs a GPU): /health, /flush_cache, /generate.
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    delay = float(sys.argv[sys.argv.index("--delay") + 1]) if "--delay" in sys.argv else 0.0
    import os, signal
    print("stand-in starting", sys.argv[1:], "pid", os.getpid(), flush=True)
    print("jit caches", os.environ.get("TVM_FFI_CACHE_DIR"), os.environ.get("TRITON_CACHE_DIR"),
          os.environ.get("FLASHINFER_WORKSPACE_BASE"), flush=True)
    if "--ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--crash" in sys.argv:
        print("CUDA error: no kernel image is available", flush=True)
        sys.exit(3)
    time.sleep(delay)
    class H(BaseHTTPRequestHandler):
        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
        def do_GET(self):
            self._send(200, {}) if self.path == "/health" else self._send(404, {"detail": "no"})
        def do_POST(self):
            self._send(200, {"flushed": True}) if self.path == "/flush_cache" else self._send(404, {})
        def log_message(self, *a):
            print("request", self.path, flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def fake_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return model


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def served_record(state: Path) -> dict:
    """The port lease record of the one server running under state folder `state` ({} while there is none)."""
    records = list((state / "ports").glob("*.json")) if (state / "ports").is_dir() else []
    return json.loads(records[0].read_text()) if records else {}


# --- the import graph of src/ (as tests/repo/test_dvc_graph.py and test_architecture_doc.py read it) -------


@cache
def source_tree():
    """src/ read as soarlab.stage_code reads a project's (module files, relative imports, stage closures)."""
    from soarlab.stage_code import SourceTree

    return SourceTree(SRC)


def module_of(path: Path) -> str:
    return source_tree().module_of(path)


def imported_modules(name: str) -> set[str]:
    """The soarlab modules `name` names in an import (also inside functions and under TYPE_CHECKING), without
    the parent packages Python runs on the way: those are how packages load, not a dependency of one module
    on another."""
    tree = source_tree()
    package = tree.module_package(name)
    found = set()
    for node in ast.walk(ast.parse(tree.module_file(name).read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base, named = tree.from_import(node, package)
            found |= named or {base}
    return {m for m in found if m.startswith("soarlab") and tree.module_file(m) and m != name}
