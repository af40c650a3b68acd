"""`soarlab sweep` for real: Hydra multirun, DVC experiments (`dvc exp run --temp`), MLflow parent and
child runs, our Optuna sweeper, Hydra's Ray and submitit launchers, a local-folder DVC remote.

One copy of the project serves the whole module, and the trials reuse each other's stages through DVC's run
cache, so after the first sweep most trials re-run only what their overrides change. To keep CPU
time modest every trial uses a small configuration (the embedded tiny model, 4 speed requests timed
once per level, 4 correctness items); `score.c_floor=1` keeps C at 1 so that trials get positive scores from
speed, except where a test needs C = 0. Mocked: only the GPU, in the Ray test, as Ray resources.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from soarlab.config import params_data
from soarlab.names.mlflow_tags import CONFIG_TAG
from soarlab.tracking.params import run_params

from support import QUICK_BENCH, children, sweep

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SMALL = ["bench.dataset.num_requests=4", *QUICK_BENCH, "eval.limit=4", "score.c_floor=1.0", "quant=rtn_w4"]


def quantize_runs(dest: Path, name: str) -> int:
    logs = (dest / "sweeps" / name).glob("*/trial.log")
    return sum(log.read_text(errors="replace").count("Running stage 'quantize'") for log in logs)


def test_grid_sweep_makes_one_experiment_and_child_run_per_trial(repo_copy_without_outputs):
    dest, env = repo_copy_without_outputs
    out = sweep(repo_copy_without_outputs, "--name", "grid", *SMALL, "engine.log_level=info,warning,error")
    assert out.count("[trial] ") == 3 and "best first" in out
    shown = json.loads(subprocess.run(["dvc", "exp", "show", "--json"], cwd=dest, env=env, capture_output=True,
                                      text=True, check=True).stdout)
    exps = [rev for row in shown for exp in row.get("experiments") or [] for rev in exp["revs"]]
    scores = {e["name"]: e["data"]["metrics"]["reports/score.json"]["data"] for e in exps if e["name"].startswith("grid-")}
    assert len(scores) == 3 and all(s["final"] > 0 and s["C"] == 1 for s in scores.values()), scores
    parent, runs = children(dest, "grid")
    assert len(runs) == 3 and {r.data.params["engine.log_level"] for r in runs} == {"info", "warning", "error"}
    assert all(r.info.status == "FINISHED" and r.data.tags["dvc.experiment"] in scores for r in runs)
    assert parent.data.params["space.engine.log_level"] == "info,warning,error"
    # Named by what the sweep varies, then the scores; the base every trial shares (SMALL) is in the trial's tag.
    for r in runs:
        level = r.data.params["engine.log_level"]
        assert r.info.run_name.startswith(f"engine.log_level={level} · final {r.data.metrics['score.final']:.2f} · "), r.info.run_name
        assert "quant=rtn_w4" in json.loads(r.data.tags["soarlab.trial"])
    table = out[out.index("best first"):].splitlines()[1:5]
    assert all("quant" not in row and "eval.limit" not in row for row in table[1:]), table
    assert sorted(row.split()[-1] for row in table[1:]) == sorted(f"engine.log_level={r.data.params['engine.log_level']}" for r in runs)
    assert sorted(line.split(":")[0] for line in out.splitlines() if line.startswith("[trial] engine.log_level=")) == \
        sorted(f"[trial] engine.log_level={r.data.params['engine.log_level']}" for r in runs)
    best_final = max(r.data.metrics["score.final"] for r in runs)
    best_levels = {f"engine.log_level={r.data.params['engine.log_level']}" for r in runs
                   if r.data.metrics["score.final"] == best_final}  # ties are possible
    assert parent.data.metrics["best.final"] == best_final
    assert best_levels & set(parent.data.tags["soarlab.best_overrides"].split())
    # One quant preset: quantized once; the serving-only trials took it from DVC's run cache.
    assert quantize_runs(dest, "grid") == 1
    # After the first trial, each trial's reference was answered without MLflow: the sweep answered it
    # once it had tagged the trial before.
    logs = [log.read_text(errors="replace") for log in (dest / "sweeps" / "grid").glob("*/trial.log")]
    assert sum("remembered, the store unchanged since" in log for log in logs) == 2, logs


def test_spec_sweep_reports_acceptance_losslessness_and_the_trade_per_level(repo_copy_without_outputs):
    """sweep=spec on the CPU engine: the spec=none trial first, then the draft model and prompt lookup, each
    with its acceptance per level, its answers compared with the spec=none trial's, and the gains table."""
    dest, env = repo_copy_without_outputs
    out = sweep(repo_copy_without_outputs, "--name", "spec", *SMALL, "sweep=spec")
    parent, runs = children(dest, "spec")
    by_spec = {r.data.tags["soarlab.spec"]: r for r in runs}
    assert sorted(by_spec) == ["ngram", "none", "standalone"] and all(r.info.status == "FINISHED" for r in runs)
    assert not [k for k in by_spec["none"].data.metrics if "spec_accept" in k or k.startswith("lossless.")]
    client = mlflow.MlflowClient(f"sqlite:///{dest / 'mlflow.db'}")

    def answers(run) -> list:
        path = client.download_artifacts(run.info.run_id, "reports/accuracy/predictions.jsonl", str(dest / "sweeps"))
        return [json.loads(line)["prediction"] for line in Path(path).read_text().splitlines()]

    for name in ("standalone", "ngram"):
        metrics = by_spec[name].data.metrics
        assert all(metrics[f"bench.{lvl}_spec_accept_length"] >= 1 for lvl in ("S1", "S8", "Smax")), metrics
        assert 0 <= metrics["bench.S1_spec_accept_rate"] <= 1
        differ = sum(a != b for a, b in zip(answers(by_spec["none"]), answers(by_spec[name])))
        assert metrics["lossless.questions"] == 4 and metrics["lossless.answers_differ"] == differ
    assert "speculative decoding against spec=none" in out
    table = out[out.index("speculative decoding against spec=none"):].splitlines()[1:4]
    assert table[0].split()[-2:] == ["weighted", "spec"] and {t.split()[-1] for t in table[1:]} == {"spec=standalone", "spec=ngram"}


def test_optuna_sweep_maximizes_final(repo_copy_without_outputs):
    dest, _ = repo_copy_without_outputs
    out = sweep(repo_copy_without_outputs, "--name", "opt", *SMALL, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3",
                "hydra.sweeper.seed=1", "engine.log_level=choice(info,warning,error)")
    assert out.count("[trial] ") == 3
    db = sqlite3.connect(dest / "sweeps" / "opt" / "optuna.db")
    values = [v for (v,) in db.execute("select value from trial_values")]
    states = [s for (s,) in db.execute("select state from trials")]
    assert states == ["COMPLETE"] * 3 and len(values) == 3 and all(v > 0 for v in values)
    parent, _ = children(dest, "opt")
    assert parent.data.metrics["best.final"] == max(values)


def test_failed_trial_is_recorded_and_the_sweep_finishes(repo_copy_without_outputs):
    dest, _ = repo_copy_without_outputs
    # The first trial is the grid's `info` trial (all cached); the second asks transformers serve
    # for a flag it does not have, so its server never starts.
    out = sweep(repo_copy_without_outputs, "--name", "fails", *SMALL, "engine.log_level=info", "engine.extra_args=[],[--no-such-flag]")
    assert "FAILED" in out and "best first" in out
    _, runs = children(dest, "fails")
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert len(runs) == 2 and len(failed) == 1
    assert "--no-such-flag" in failed[0].data.tags["soarlab.trial"] and failed[0].data.tags["soarlab.failure"]
    # Its server log outlives the trial's temporary DVC workspace (issue 21): beside its trial.log, named
    # by the failure's fix, and an artifact of its MLflow run.
    kept = next((dest / "sweeps" / "fails").glob("*/logs/evaluate-server.log"))
    assert "--no-such-flag" in kept.read_text()
    assert f"read {kept}" in failed[0].data.tags["soarlab.failure"] and f"in full: {kept.parent.parent}" in out
    client = mlflow.MlflowClient(f"sqlite:///{dest / 'mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(failed[0].info.run_id, "logs")}
    assert {"logs/evaluate-server.log", "logs/trial.log"} <= artifacts


def test_interrupted_sweep_resumes_without_redoing_finished_trials(repo_copy_without_outputs):
    dest, env = repo_copy_without_outputs
    # The first trial is cached from the grid; the second is new (bench and accuracy run), so that the
    # interrupt lands while it runs.
    args = ["soarlab", "sweep", "--name", "resume", *SMALL, "engine.log_level=info,debug"]
    # A shell without job control starts `cmd &` with SIGINT ignored, and children inherit that (Python then
    # installs no KeyboardInterrupt handler): give the sweep Ctrl-C's default, however pytest was started.
    proc = subprocess.Popen(args, cwd=dest, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stdout:  # the first trial (cached from the grid) finishes; interrupt the second
        seen.append(line)
        if line.startswith("[trial] "):
            second = dest / "sweeps" / "resume" / "1" / "trial.log"
            while not (second.is_file() and "Running stage" in second.read_text(errors="replace")):
                time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=600)[0]
    assert proc.returncode != 0, "".join(seen) + rest
    parent, runs = children(dest, "resume")
    assert len(runs) == 1 and parent.info.status == "KILLED", "interrupted: not RUNNING until a resume"
    out = sweep(repo_copy_without_outputs, "--name", "resume", *SMALL, "engine.log_level=info,debug")
    assert out.count("finished earlier in this sweep; not run again") == 1 and out.count("[trial] ") == 2
    parent, runs = children(dest, "resume")
    assert parent.info.status == "FINISHED"
    assert sorted(r.data.params["engine.log_level"] for r in runs) == ["debug", "info"]


def test_ray_launcher_runs_two_trials_at_once_on_their_own_gpus(repo_copy_without_outputs):
    dest, _ = repo_copy_without_outputs
    # The GPUs are fake: a local Ray instance is told it has 2, and Ray gives each trial one,
    # setting its CUDA_VISIBLE_DEVICES. Both trials are cached from the grid, so they are short.
    sweep(repo_copy_without_outputs, "--name", "ray", *SMALL, "engine.log_level=info,warning", "hydra/launcher=ray_gpu",
          "+hydra.launcher.ray.init.num_gpus=2", "+hydra.launcher.ray.init.num_cpus=2",
          "+hydra.launcher.ray.init.include_dashboard=false")
    _, runs = children(dest, "ray")
    assert len(runs) == 2
    devices = {r.data.tags["soarlab.cuda_visible_devices"] for r in runs}
    assert devices == {r.data.tags["soarlab.gpu"] for r in runs} and len(devices) == 2
    (s1, e1), (s2, e2) = [(float(r.data.tags["soarlab.trial_started"]), float(r.data.tags["soarlab.trial_ended"])) for r in runs]
    assert s1 < e2 and s2 < e1, "the two trials did not run at the same time"


def test_slurm_launcher_config_composes_and_renders_its_job(repo_copy_without_outputs, tmp_path, monkeypatch):
    import submitit
    import yaml
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    dest, _ = repo_copy_without_outputs
    out = sweep(repo_copy_without_outputs, *SMALL, "hydra/launcher=slurm_gpu", "hydra.launcher.partition=gpu", "--cfg", "hydra",
                "--resolve")
    launcher = yaml.safe_load(out[out.index("hydra:"):])["hydra"]["launcher"]
    assert launcher["gpus_per_node"] == 1 and launcher["tasks_per_node"] == 1 and launcher["partition"] == "gpu"
    # No SLURM here: render the sbatch script that the launcher's executor would submit, with the
    # parameters translated the way hydra-submitit-launcher translates them. submitit's SLURM executor
    # looks for `srun` before it is built; a stub that is never run stands in for it.
    (tmp_path / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    params = {k if k in base else f"slurm_{k}": v for k, v in launcher.items()
              if k not in ("_target_", "submitit_folder", "max_num_timeout")}
    executor = submitit.AutoExecutor(cluster="slurm", folder=dest / "sweeps" / "slurm-render")
    executor.update_parameters(**params)
    script = executor._executor._make_submission_file_text("soarlab-trial", "uid")
    assert "#SBATCH --gpus-per-node=1" in script and "#SBATCH --partition=gpu" in script, script
    # submitit's local executor stands in for SLURM, to run one real trial through the submitit launcher.
    sweep(repo_copy_without_outputs, "--name", "submitit", *SMALL, "engine.log_level=info", "hydra/launcher=submitit_local",
          "hydra.launcher.gpus_per_node=0")
    _, runs = children(dest, "submitit")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"


@pytest.fixture
def mlflow_server(tmp_path):
    """The team's tracking server: a real `mlflow server` on a free loopback port."""
    from soarlab.engines.server import free_port, is_healthy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                             "--artifacts-destination", str(tmp_path / "server-artifacts")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            # without MLflow's GenAI job runner: its workers cost 24 CPU s per server here
                            # and hold nothing SOAR Lab logs
                            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    try:
        deadline = time.monotonic() + 180
        while not is_healthy(url, timeout=2) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert is_healthy(url, timeout=2), "mlflow server did not start"
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_trial_on_another_machine_pulls_from_the_dvc_remote_and_logs_to_the_team_server(repo_copy_without_outputs, tmp_path, mlflow_server):
    dest, env = repo_copy_without_outputs
    # The team's git remote and DVC remote, both local folders here.
    origin, remote = tmp_path / "origin.git", tmp_path / "dvc-remote"
    for cmd in (["git", "init", "-q", "--bare", str(origin)], ["git", "remote", "add", "origin", str(origin)],
                ["dvc", "remote", "add", "-d", "team", str(remote)], ["git", "commit", "-qam", "team remote"],
                ["git", "push", "-q", "origin", "main"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True)
    out = sweep(repo_copy_without_outputs, "--name", "push", *SMALL, "engine.log_level=info")  # cached here; pushes what it has
    assert "could not push" not in out
    other = tmp_path / "other-node"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(origin), str(other)], env=env, check=True)
    out = sweep((other, env), "--name", "pull", *SMALL, "engine.log_level=info", "tracking=server",
                f"tracking.uri={mlflow_server}")
    assert out.count("[trial] ") == 1 and "FAILED" not in out
    log = (other / "sweeps" / "pull" / "0" / "trial.log").read_text()
    assert "exp run --temp --pull" in log and "Stage 'quantize' is cached" in log
    assert "Running stage 'quantize'" not in log and "Running stage 'fetch-model'" not in log
    parent, runs = children(other, "pull", uri=mlflow_server)
    assert len(runs) == 1
    config = mlflow.artifacts.download_artifacts(run_id=runs[0].info.run_id, artifact_path=runs[0].data.tags[CONFIG_TAG],
                                                 dst_path=str(tmp_path / "config"), tracking_uri=mlflow_server)
    assert run_params(params_data(config))["tracking.uri"] == mlflow_server  # the run's composed config, as logged
