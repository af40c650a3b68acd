"""The sweep's parts that need no pipeline run: search-space mapping, ranking with the accuracy
gate, which overrides reach DVC, failure reasons, GPU leases (GPUs named through
CUDA_VISIBLE_DEVICES, as Ray and SLURM do; no GPU is used)."""

from __future__ import annotations

import threading

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.soarlab_optuna_sweeper.optuna_sweeper import distribution
from support import ROOT
from soarlab.config import compose
from soarlab.experiments import failure_reason
from soarlab.sweep.app import add_overrides, split_name
from soarlab.sweep.gpu_lease import gpu_lease
from soarlab.sweep.record import TrialResult, trial_key
from soarlab.sweep.trial import pipeline_overrides


def test_hydra_sweep_syntax_becomes_optuna_distributions():
    parsed = OverridesParser.create().parse_overrides(
        ["quant=gptq_w4,gptq_w8", "a=range(1,4)", "b=tag(log,interval(1e-3,1))", "c=tag(int,interval(1,8))"])
    quant, a, b, c = (distribution(o) for o in parsed)
    assert quant.choices == ("gptq_w4", "gptq_w8") and a.choices == ("1", "2", "3")
    assert (b.low, b.high, b.log) == (1e-3, 1.0, True) and (c.low, c.high, c.step) == (1, 8, 1)


def test_c_zero_never_outranks_a_valid_trial_and_failures_come_last():
    fast_but_gated = TrialResult(["a"], final=0.0, C=0.0)
    slow_valid = TrialResult(["b"], final=0.5, C=0.92)
    failed = TrialResult(["c"], failure="server did not start")
    assert sorted([failed, fast_but_gated, slow_valid], key=TrialResult.rank_key) == [slow_valid, fast_but_gated, failed]
    assert (slow_valid.objective, fast_but_gated.objective, failed.objective) == (0.5, 0.0, None)


def test_only_pipeline_overrides_reach_dvc():
    given = ["quant=gptq_w8", "sweep=quant", "trial.timeout_s=5", "+engine.server_args.kv-cache-dtype=fp8"]
    cfg = compose(given[:1] + given[3:] + ["engine=sglang"])
    assert pipeline_overrides(given, ["engine.port=0"], cfg) == [
        "quant=gptq_w8", "+engine.server_args.kv-cache-dtype=fp8", "engine.port=0"]
    assert pipeline_overrides(["engine.port=31000"], ["engine.port=0"], cfg) == ["engine.port=31000"]
    # An external server is started elsewhere: it has no port to pick, and Hydra would refuse the key.
    external = compose(["engine=external"])
    assert pipeline_overrides(["engine=external"], ["engine.port=0"], external) == ["engine=external"]
    assert trial_key(["b=1", "a=2"]) == trial_key(["a=2", "b=1"])


def test_sweep_arguments_keep_hydra_options_and_overrides_apart():
    assert split_name(["--name", "s1", "-m", "quant=a,b"]) == ("s1", ["-m", "quant=a,b"])
    assert add_overrides(["-m", "quant=a", "--cfg", "hydra"], ["x=1"]) == ["-m", "x=1", "quant=a", "--cfg", "hydra"]
    assert add_overrides(["--cfg", "job"], ["x=1"]) == ["--cfg", "job", "x=1"]


def _launcher(*overrides: str) -> dict:
    """hydra.launcher as Hydra composes conf/sweep_app.yaml with `overrides` (resolved: the resolver is real)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    import soarlab.sweep  # noqa: F401  (registers ${soarlab.parallel_trials:})

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="sweep_app", overrides=list(overrides), return_hydra_config=True)
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)


def test_launchers_give_each_trial_one_gpu_from_conf(monkeypatch):
    """conf/hydra/launcher/*.yaml extend the installed launchers' configs; the command line still wins."""
    from soarlab.sweep.gpu_lease import parallel_trials

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")  # named GPUs, as a cluster hands them out
    local = _launcher()
    assert local["_target_"].endswith("JoblibLauncher") and local["n_jobs"] == parallel_trials() == 3
    ray = _launcher("hydra/launcher=ray_gpu", "+hydra.launcher.ray.init.address=HEAD:6379")
    assert ray["_target_"].endswith("RayLauncher") and ray["ray"]["remote"] == {"num_gpus": 1}
    assert ray["ray"]["init"]["address"] == "HEAD:6379"
    slurm = _launcher("hydra/launcher=slurm_gpu", "hydra.launcher.gpus_per_node=2")
    assert slurm["_target_"].endswith("SlurmLauncher") and (slurm["gpus_per_node"], slurm["tasks_per_node"]) == (2, 1)


def test_failure_reason_is_the_stage_error_line():
    log = "Running stage 'evaluate':\nsoarlab: error: server exited with 2 before it was ready. Fix: see log\nERROR: failed to reproduce 'evaluate'\n"
    assert failure_reason(log, 255) == "server exited with 2 before it was ready. Fix: see log"
    assert failure_reason("torch.OutOfMemoryError: CUDA out of memory\nERROR: failed", 255).startswith("out of memory")


def test_parallel_trials_lease_different_gpus(monkeypatch, tmp_path, state_dir):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,8")  # two GPUs by name; none is touched
    with gpu_lease(tmp_path) as first, gpu_lease(tmp_path) as second:
        assert {first.gpu, second.gpu} == {"7", "8"}
        assert sorted(p.name for p in (state_dir / "gpu-leases").iterdir()) == ["gpu-7.lock", "gpu-8.lock"]
        assert first.env["CUDA_VISIBLE_DEVICES"] != second.env["CUDA_VISIBLE_DEVICES"]
        assert first.env["TMPDIR"] != second.env["TMPDIR"]
        assert first.env["TRITON_CACHE_DIR"] != second.env["TRITON_CACHE_DIR"]
        third, got = gpu_lease(tmp_path, poll_s=0.05), []
        waiter = threading.Thread(target=lambda: got.append(third.__enter__().gpu))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not got, "a third trial must wait while both GPUs are leased"
    waiter.join(10)
    assert got and got[0] in {"7", "8"}
    third.__exit__(None, None, None)


def test_no_gpu_means_no_lease(monkeypatch, tmp_path, state_dir):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with gpu_lease(tmp_path) as lease:
        assert lease.gpu is None and "CUDA_VISIBLE_DEVICES" not in lease.env
        assert not (state_dir / "gpu-leases").exists()


def test_a_trials_processes_keep_the_machines_leases(monkeypatch, tmp_path):
    """A trial's TMPDIR is a folder of its own, but its servers' port leases (and GPU leases) stay in the
    machine's state folder, where the other trials' and runs' are: else two trials could take one port."""
    import os
    import subprocess
    import sys

    from soarlab.names.environment import STATE_DIR_ENV
    from soarlab.paths import state_dir

    monkeypatch.delenv(STATE_DIR_ENV, raising=False)  # the default, under the machine's temp folder
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with gpu_lease(tmp_path) as lease:
        seen = subprocess.run([sys.executable, "-c", "from soarlab.paths import state_dir; print(state_dir())"],
                              env={**os.environ, **lease.env}, capture_output=True, text=True, check=True).stdout.strip()
    assert seen == str(state_dir()) and not seen.startswith(lease.env["TMPDIR"])


@pytest.mark.parametrize("value", ["", "-1"])
def test_hidden_gpus_count_as_none(monkeypatch, value):
    from soarlab.sweep.gpu_lease import parallel_trials

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert parallel_trials() == 1


def test_sweep_refuses_a_lock_whose_folder_outputs_are_not_cached(tmp_path, monkeypatch):
    import os
    import sys
    from pathlib import Path

    import yaml

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # dvc
    temporary = tmp_path / "tmp"  # where `dvc` writes its temporary files (and a usage report it cannot send offline)
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))

    from soarlab.errors import SoarError
    from soarlab.sweep.app import check_outputs_cached

    outs = [{"path": "data", "md5": "ab12.dir"}, {"path": "reports/score.json", "md5": "cd34"}]
    removed = [{"path": "reports/bench", "md5": "ef56.dir"}]  # a stage dvc.yaml no longer has: never run
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"s": {"cmd": "true"}}}))
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"stages": {"s": {"outs": outs}, "gone": {"outs": removed}}}))
    with pytest.raises(SoarError, match=r"\(data\) are not.*dvc pull"):
        check_outputs_cached(tmp_path)
    listing = tmp_path / ".dvc" / "cache" / "files" / "md5" / "ab" / "12.dir"
    listing.parent.mkdir(parents=True)
    listing.write_text("[]")
    check_outputs_cached(tmp_path)  # a `cache: false` file output is never in the cache: not asked for
    assert not list(temporary.iterdir())  # the DVC commands SOAR Lab runs itself send no usage report


def test_parent_run_logs_a_space_that_adds_a_flag(tmp_path):
    """`+engine.server_args.x=a,b` (how a flag is added) is a valid sweep; MLflow refuses '+' in a param
    name, which left the H200 sweep's parent run without its space. A real sqlite store."""
    import mlflow

    from soarlab.sweep.record import SweepRecord

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose([f"tracking.uri={uri}"])
    space = {"+engine.server_args.kv-cache-dtype": "auto,fp8_e4m3", "engine.server_args.chunked-prefill-size": "4096"}
    run_id = SweepRecord(cfg, "s").open_parent(space, ["+engine.server_args.kv-cache-dtype=auto,fp8_e4m3"])
    params = mlflow.MlflowClient(uri).get_run(run_id).data.params
    assert params == {"space.engine.server_args.kv-cache-dtype": "auto,fp8_e4m3",
                      "space.engine.server_args.chunked-prefill-size": "4096"}
    # What the sweep varies names its trials: a trial that fails before its pipeline's run is named by it too.
    record = SweepRecord(cfg, "s")
    assert record.varies() == ["engine.server_args.kv-cache-dtype"]
    failed = record.record_failure(["engine.server_args.chunked-prefill-size=4096", "+engine.server_args.kv-cache-dtype=auto"],
                                   "server did not start", {})
    assert mlflow.MlflowClient(uri).get_run(failed).info.run_name == "engine.server_args.kv-cache-dtype=auto · failed"


def test_a_trial_is_shown_by_what_its_sweep_varies_not_the_base_every_trial_shares():
    """A GPU sweep's trials share a dozen overrides (engine=sglang, engine.python=..., the speed set):
    its lines and table show the overrides of the keys given with sweep syntax, each line <= 200 characters."""
    from soarlab.sweep.record import summary_table, varying_keys

    base = ["engine=sglang", "bench.dataset.num_requests=4", "engine.python=/opt/sglang-env/bin/python" + "/x" * 40]
    space = {**dict(o.split("=", 1) for o in base), "+engine.server_args.kv-cache-dtype": "auto,fp8_e4m3",
             "quant": "choice(gptq_w4,gptq_w8)", "engine.server_args.chunked-prefill-size": "range(4096,16385,4096)"}
    varies = varying_keys(space)
    assert varies == ["engine.server_args.chunked-prefill-size", "engine.server_args.kv-cache-dtype", "quant"]
    trials = [TrialResult([*base, "quant=gptq_w4", f"+engine.server_args.kv-cache-dtype={dtype}",
                           "engine.server_args.chunked-prefill-size=4096"], final=final, C=1.0,
                          durations={"S1": 1.5, "S8": 2.5, "Smax": 3.5})
              for dtype, final in (("auto", 40.0), ("fp8_e4m3", 41.0))]
    trials.append(TrialResult([*base, "quant=gptq_w8", "+engine.server_args.kv-cache-dtype=auto",
                               "engine.server_args.chunked-prefill-size=8192"], failure="out of memory: " + "x" * 300))
    assert trials[1].line(varies) == ("quant=gptq_w4 engine.server_args.kv-cache-dtype=fp8_e4m3 "
                                      "engine.server_args.chunked-prefill-size=4096: final=41.0 C=1.0 S1=1.50s S8=2.50s Smax=3.50s")
    table = summary_table(trials, varies).splitlines()
    assert table[1].endswith("  quant=gptq_w4 engine.server_args.kv-cache-dtype=fp8_e4m3 engine.server_args.chunked-prefill-size=4096")
    assert "FAILED" in table[3] and "quant=gptq_w8" in table[3]
    assert all(len(line) <= 200 and "engine.python" not in line and "num_requests" not in line
               for line in [*table, *(t.line(varies) for t in trials)])
    # A sweep recorded before its varying keys were: every override, as before.
    assert "engine.python=" in trials[0].line(None)


@pytest.mark.slow
def test_sweep_help_on_a_fresh_clone_without_dvc_on_path(tmp_path):
    """A clone whose DVC cache is empty (the committed dvc.lock names outputs made elsewhere), and
    `.venv/bin/soarlab` called without an activated venv: --help prints Hydra's help, never a refusal,
    and the sweep's own check finds `dvc` beside soarlab's interpreter."""
    import subprocess
    import sys
    from pathlib import Path

    from support import make_project

    dest, env = make_project(tmp_path / "clone")
    env["PATH"] = "/usr/bin:/bin"  # no dvc here: it lives beside the interpreter only
    soarlab = str(Path(sys.executable).parent / "soarlab")
    help_ = subprocess.run([soarlab, "sweep", "--help"], cwd=dest, env=env, capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0, help_.stderr
    assert "== Configuration groups ==" in help_.stdout and "error" not in help_.stderr
    # Running one: the cached-outputs check runs `dvc` (found beside the interpreter) and refuses in one line.
    run = subprocess.run([soarlab, "sweep", "quant=none"], cwd=dest, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "No such file or directory: 'dvc'" not in run.stderr
    assert "are not in this machine's DVC cache" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_experiments_get_a_git_identity_where_git_has_none(tmp_path):
    """A fresh machine has no git user: DVC then refuses every experiment commit. The trial's environment
    gets a fallback identity there, and none where git has one (a user's own wins). Real git."""
    import os
    import subprocess

    from soarlab.experiments import git_identity_env

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True, env=env)
    fallback = git_identity_env(tmp_path / "repo", env)
    assert fallback == {"GIT_AUTHOR_NAME": "SOAR Lab", "GIT_AUTHOR_EMAIL": "soarlab@localhost",
                        "GIT_COMMITTER_NAME": "SOAR Lab", "GIT_COMMITTER_EMAIL": "soarlab@localhost"}
    commit = subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=tmp_path / "repo",
                            env={**env, **fallback}, capture_output=True, text=True)
    assert commit.returncode == 0, commit.stderr
    subprocess.run(["git", "config", "--global", "user.name", "Ada"], check=True, env=env)
    subprocess.run(["git", "config", "--global", "user.email", "ada@example.org"], check=True, env=env)
    assert git_identity_env(tmp_path / "repo", env) == {}
