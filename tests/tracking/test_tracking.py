"""Tracking against a real MLflow sqlite store in a temporary project."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import pytest
import yaml

from soarlab.atomic import write_json
from soarlab.config import compose, composed_data, hydra_config, to_yaml
from soarlab.paths import owning_project_root
from soarlab.tracking.durations import recorded_durations
from soarlab.tracking import runs_view
from soarlab.tracking.params import LoggedConfig, run_params
from soarlab.tracking.pipeline_run import log_pipeline_run
from soarlab.tracking.store import tracking_uri

from support import copy_conf


@pytest.fixture
def project_with_reports(tmp_path, monkeypatch):
    """(folder, composed config) of a project (the working directory): conf/, a params.yaml and filled reports/."""
    copy_conf(tmp_path)
    reports = tmp_path / "reports"
    write_json(reports / "bench" / "metrics.json", {"S1_duration_s": 2.0, "S8_duration_s": 3.0, "Smax_duration_s": 4.0, "S1_valid": 1, "S8_valid": 1, "Smax_valid": 1})
    write_json(reports / "accuracy" / "metrics.json", {"ori_accuracy": 81.5, "note": "not a number"})
    write_json(reports / "score.json", {"final": 99.5, "C": 1.0, "invalid_levels": []})
    (reports / "bench" / "S1.jsonl").write_text('{"latency": 1}\n')
    overrides = ["tracking.experiment=test"]
    (tmp_path / "params.yaml").write_text(to_yaml(hydra_config(overrides, root=tmp_path)))  # as `soarlab params` writes it
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    return tmp_path, compose(overrides)


def test_one_run_with_params_metrics_artifacts_and_tags(project_with_reports, monkeypatch):
    root, cfg = project_with_reports
    monkeypatch.setenv("DVC_EXP_NAME", "brave-exp")
    run_id = log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha="abc")
    assert tracking_uri(cfg) == f"sqlite:///{root / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri(cfg))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["soarlab.config_name"] == cfg.quant.name == "gptq_w4_mixed"  # nothing overridden
    # The name carries the scores (the runs table hides metric columns outside the score view), after the preset.
    assert run.info.run_name == "gptq_w4_mixed · final 99.50 · C 1 · ori 81.5 · S1 2.00s S8 3.00s Smax 4.00s"
    assert run.data.params["quant.name"] == "gptq_w4_mixed" and LoggedConfig(run)["engine.port"] == "30000"
    assert run.data.metrics["bench.S1_duration_s"] == 2.0 and run.data.metrics["accuracy.ori_accuracy"] == 81.5
    assert run.data.metrics["score.final"] == 99.5 and "accuracy.note" not in run.data.metrics
    assert run.data.tags["dvc.experiment"] == "brave-exp" and run.data.tags["soarlab.speed_set_sha"] == "abc"
    artifacts = {a.path for a in client.list_artifacts(run_id, "reports/bench")}
    assert {"reports/bench/S1.jsonl", "reports/bench/metrics.json"} <= artifacts
    assert (root / "mlartifacts").is_dir()


def test_params_are_the_configuration_and_the_composed_config_is_an_artifact(project_with_reports, monkeypatch, tmp_path):
    """Issue 37: the runs table's params are each group's preset and the overrides (a sweep trial's own ones
    too), incidental keys left out; the composed config is the run's params file artifact, which the decide
    commands read (LoggedConfig); the experiment's score view selects final, C, ori and the level durations."""
    root, _ = project_with_reports
    overrides = ["tracking.experiment=test", "quant=none", "eval.seed=4321", "engine.port=31000"]
    (root / "params.yaml").write_text(to_yaml(hydra_config(overrides, root=root)))
    monkeypatch.setenv("SOARLAB_TRIAL", json.dumps(["engine.log_level=info"]))  # a sweep trial's, as conf/ has it
    cfg = compose(overrides, root=root)
    run_id = log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha="abc")
    client = mlflow.MlflowClient(tracking_uri(cfg))
    run = client.get_run(run_id)
    assert run.data.params == {"model.name": "tiny", "quant.name": "none", "engine.name": "transformers", "spec.name": "none",
                               "package.name": "soar", "eval.seed": "4321", "engine.log_level": "info"}
    logged = client.download_artifacts(run_id, run.data.tags["soarlab.config"], str(tmp_path / "dl"))
    assert yaml.safe_load(open(logged).read()) == composed_data(overrides, root=root)
    assert dict(LoggedConfig(run)) == run_params(composed_data(overrides, root=root))
    earlier = client.create_run(run.info.experiment_id).info.run_id  # logged before: the whole config in its params
    client.log_param(earlier, "quant.name", "none")
    assert dict(LoggedConfig(client.get_run(earlier))) == {"quant.name": "none"}
    experiment = client.get_experiment(run.info.experiment_id)
    view = json.loads(json.loads(experiment.tags["mlflow.sharedViewState.soarlab-scores"])["state"])
    columns = [c.removeprefix("metrics.`").removesuffix("`") for c in view["selectedColumns"] if c.startswith("metrics.")]
    assert columns == ["score.final", "score.C", "accuracy.ori_accuracy", "bench.S1_duration_s", "bench.S8_duration_s",
                       "bench.Smax_duration_s"] and set(columns) <= set(run.data.metrics)
    assert runs_view.runs_table_page(run.info.experiment_id).endswith(f"/runs?workflowType=machine_learning&viewStateShareKey={runs_view.VIEW_ID}")


def test_recorded_durations_filter_by_model_and_speed_set(project_with_reports):
    root, cfg = project_with_reports
    log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha="abc")
    write_json(root / "reports" / "bench" / "metrics.json", {"S1_duration_s": 1.0, "S8_duration_s": 9.0, "Smax_duration_s": 9.0, "S1_valid": 1, "S8_valid": 1, "Smax_valid": 1})
    log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha="other-set")
    write_json(root / "reports" / "bench" / "metrics.json", {"S1_duration_s": 0.5, "S8_duration_s": 0.5, "Smax_duration_s": 0.5, "S1_valid": 0, "S8_valid": 1, "Smax_valid": 1})
    log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha="abc")
    found = recorded_durations(cfg, "abc")
    assert found == [{"S1": 2.0, "S8": 3.0, "Smax": 4.0}]  # other speed set and invalid level left out


def test_dvc_temp_copy_logs_into_the_owning_project(tmp_path, monkeypatch):
    owner = tmp_path / "proj"
    copy = owner / ".dvc" / "tmp" / "exps" / "tmp123"
    for folder in (owner, copy):
        (folder / "conf").mkdir(parents=True)
        (folder / "conf" / "config.yaml").write_text("{}\n")
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert owning_project_root(copy) == owner
    monkeypatch.setenv("DVC_ROOT", str(owner))
    assert owning_project_root(copy / "conf") == owner


def test_run_name_shows_the_flag_two_sweep_trials_differ_in(monkeypatch):
    """A group's keys are named against the group's own preset: trials of engine=sglang that differ in one
    serving flag get different names (seen on the H200 sweep, where both were 'none · engine=sglang')."""
    from soarlab.tracking.params import config_name, overrides_of, run_params
    from soarlab.names.environment import TRIAL_LABEL_ENV

    def name(*overrides):
        cfg = compose(list(overrides))
        return config_name(cfg, overrides_of(run_params(composed_data(list(overrides))), cfg.decide.incidental_params))

    assert name() == "gptq_w4_mixed"
    assert name("quant=none", "engine=sglang") == "none · engine=sglang"
    assert name("quant=none", "engine=sglang", "+engine.server_args.kv-cache-dtype=auto") == \
        "none · engine=sglang, engine.server_args.kv-cache-dtype=auto"
    assert name("engine=external", "engine.url=http://gpu-box:30000") == "gptq_w4_mixed · engine=external"  # incidental
    assert name("bench.rerun=compare-1a2b3c4d-A2") == "gptq_w4_mixed · rerun A2"  # compare --rerun: twins apart
    monkeypatch.setenv(TRIAL_LABEL_ENV, "engine.server_args.chunked-prefill-size=4096")  # a sweep trial: what its sweep varies
    assert name("quant=none", "engine=sglang", "engine.server_args.chunked-prefill-size=4096") == \
        "engine.server_args.chunked-prefill-size=4096"


@pytest.fixture
def track_project(tmp_path):
    """A project `soarlab stage track` runs in: conf/, a valid params.yaml and filled reports/."""
    copy_conf(tmp_path)
    reports = tmp_path / "reports"
    write_json(reports / "bench" / "metrics.json", {"S1_duration_s": 2.0, "S8_duration_s": 3.0, "Smax_duration_s": 4.0,
                                                    "S1_valid": 1, "S8_valid": 1, "Smax_valid": 1})
    write_json(reports / "score.json", {"final": 99.5, "C": 1.0, "invalid_levels": []})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "speed.jsonl").write_text('{"question": "q", "model_response": "a"}\n')
    cfg = compose([f"paths.reports={reports}", f"paths.data={tmp_path / 'data'}", "tracking.experiment=test"], root=tmp_path)
    (tmp_path / "params.yaml").write_text(to_yaml(cfg))
    return tmp_path


def track(root, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DVC_ROOT", "DVC_STAGE", "SOARLAB_SWEEP", "SOARLAB_TRIAL", "SOARLAB_TRIAL_LABEL")}
    return subprocess.Popen([sys.executable, "-m", "soarlab.cli", "stage", "track", *args], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def logged_runs(root) -> list:
    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name("test").experiment_id])


def test_concurrent_tracks_of_the_same_inputs_log_one_run(track_project):
    """Four real `soarlab stage track` processes at once on one new sqlite store (issue 21: 2 runs in 2 of 6
    rounds when the look-up and the new run were two steps)."""
    procs = [track(track_project) for _ in range(4)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(logged_runs(track_project)) == 1
    assert sum("already holds these inputs" in out for out in outs) == 3, outs


def test_track_params_file_is_the_config_its_digest_and_artifact_come_from(track_project):
    """`--params FILE`: FILE, not params.yaml, decides whether these inputs were logged before."""
    first = track(track_project)
    assert first.communicate(timeout=600) and first.returncode == 0
    other = track_project / "other.yaml"
    other.write_text((track_project / "params.yaml").read_text().replace("seed: 1234", "seed: 4321"))
    second = track(track_project, "--params", str(other))
    out = second.communicate(timeout=600)[0]
    assert second.returncode == 0 and "already holds" not in out, out
    runs = logged_runs(track_project)
    assert sorted(LoggedConfig(r)["eval.seed"] for r in runs) == ["1234", "4321"]  # read from each run's artifact
    client = mlflow.MlflowClient(f"sqlite:///{track_project / 'mlflow.db'}")
    second_run = next(r for r in runs if r.data.params.get("eval.seed") == "4321")  # an override: a param
    assert "other.yaml" in {a.path for a in client.list_artifacts(second_run.info.run_id)}


def test_a_restored_measurement_gets_its_new_score_not_a_second_run(track_project):
    """DVC restores every stage of a configuration measured before from its run cache, but another run
    changed the reference since, so score.json differs (issue 37: the leaderboard and the noise record
    counted the one measurement twice). track updates that run's score and says so; no second run."""
    client = mlflow.MlflowClient(f"sqlite:///{track_project / 'mlflow.db'}")
    first = track(track_project)
    assert first.communicate(timeout=600) and first.returncode == 0
    (before,) = logged_runs(track_project)
    assert before.info.run_name.endswith(" · final 99.50 · C 1 · S1 2.00s S8 3.00s Smax 4.00s")
    score = track_project / "reports" / "score.json"
    write_json(score, {"final": 42.25, "C": 1.0, "invalid_levels": []})  # what score writes against a faster reference
    again = track(track_project)
    out = again.communicate(timeout=600)[0]
    assert again.returncode == 0 and "restored from DVC's run cache" in out and "99.5 -> 42.25" in out, out
    (run,) = logged_runs(track_project)
    assert run.data.metrics["score.final"] == 42.25
    # Its name carries the score, so it follows (the configuration's name kept apart, in a tag).
    assert run.info.run_name == before.info.run_name.replace("final 99.50", "final 42.25")
    assert run.data.tags["soarlab.config_name"] == before.data.tags["soarlab.config_name"]
    assert run.info.run_name.startswith(run.data.tags["soarlab.config_name"][:20])
    logged_score = client.download_artifacts(run.info.run_id, "reports/score.json", str(track_project / "dl"))
    assert json.loads(open(logged_score).read())["final"] == 42.25
    unchanged = track(track_project)
    assert "already holds these inputs" in unchanged.communicate(timeout=600)[0]
    assert len(logged_runs(track_project)) == 1


def stage_probe(root, stage: str) -> str:
    """`soarlab stage STAGE` in `root`; its output ends with whether it loaded MLflow."""
    probe = (f"import sys; from soarlab.cli import main; code = main(['stage', '{stage}']); "
             "print('mlflow loaded' if 'mlflow' in sys.modules else 'mlflow not loaded'); sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_no_op_track_skips_mlflow_while_the_store_is_unchanged(track_project):
    """The second track of the same inputs answers from the memo without importing MLflow (what makes a
    no-op `dvc repro` fast); a change to the store (a deleted run) or a new store is still noticed."""
    (track_project / ".dvc").mkdir()

    def run_track() -> str:
        return stage_probe(track_project, "track")

    first = run_track()
    assert "logged to" in first and "mlflow loaded" in first
    again = run_track()
    assert "already holds these inputs" in again and "mlflow not loaded" in again
    (run,) = logged_runs(track_project)
    mlflow.MlflowClient(f"sqlite:///{track_project / 'mlflow.db'}").delete_run(run.info.run_id)
    after_delete = run_track()
    assert "logged to" in after_delete and len(logged_runs(track_project)) == 1
    (track_project / "mlflow.db").unlink()
    new_store = run_track()
    assert "logged to" in new_store and len(logged_runs(track_project)) == 1


def test_the_reference_after_a_logged_run_is_answered_by_track(track_project):
    """track answers the reference stage's question for the store it has just written: the next reference
    reads it without loading MLflow, and it is what MLflow answers (the logged run is the best recorded).
    Another write to the store since (a deleted run) is noticed. Before the first run there is no store, and
    so no recorded run, which reference knows without loading MLflow (or making the store)."""
    (track_project / ".dvc").mkdir()
    reference = track_project / "reports" / "reference.json"
    nothing = {"source": "best_recorded", "durations": {"S1": None, "S8": None, "Smax": None}, "runs": 0}
    assert "mlflow not loaded" in stage_probe(track_project, "reference")
    assert json.loads(reference.read_text()) == nothing and not (track_project / "mlflow.db").exists()
    assert "logged to" in stage_probe(track_project, "track")
    out = stage_probe(track_project, "reference")
    assert "mlflow not loaded" in out and "remembered, the store unchanged since" in out
    best = {"source": "best_recorded", "durations": {"S1": 2.0, "S8": 3.0, "Smax": 4.0}, "runs": 1}
    assert json.loads(reference.read_text()) == best
    (run,) = logged_runs(track_project)
    mlflow.MlflowClient(f"sqlite:///{track_project / 'mlflow.db'}").delete_run(run.info.run_id)
    assert "mlflow loaded" in stage_probe(track_project, "reference")
    assert json.loads(reference.read_text()) == nothing
