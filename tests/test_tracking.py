"""Tracking against a real MLflow sqlite store in a temporary project."""

from __future__ import annotations

import shutil

import mlflow
import pytest

from soarlab.atomic import write_json
from soarlab.config import compose
from soarlab.paths import owning_project_root
from soarlab.tracking.durations import recorded_durations
from soarlab.tracking.pipeline_run import log_pipeline_run
from soarlab.tracking.store import tracking_uri

from conftest import ROOT


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with conf/ (so it is found as the root) and a filled reports/."""
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    reports = tmp_path / "reports"
    write_json(reports / "bench" / "metrics.json", {"S1_duration_s": 2.0, "S8_duration_s": 3.0, "Smax_duration_s": 4.0, "S1_valid": 1, "S8_valid": 1, "Smax_valid": 1})
    write_json(reports / "accuracy" / "metrics.json", {"ori_accuracy": 81.5, "note": "not a number"})
    write_json(reports / "score.json", {"final": 99.5, "C": 1.0, "invalid_levels": []})
    (reports / "bench" / "S1.jsonl").write_text('{"latency": 1}\n')
    (tmp_path / "params.yaml").write_text("a: 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    return tmp_path, compose(["tracking.experiment=test"])


def test_one_run_with_params_metrics_artifacts_and_tags(project, monkeypatch):
    root, cfg = project
    monkeypatch.setenv("DVC_EXP_NAME", "brave-exp")
    run_id = log_pipeline_run(cfg, root / "reports", root / "params.yaml", speed_set_sha="abc")
    assert tracking_uri(cfg) == f"sqlite:///{root / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri(cfg))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == cfg.quant.name == "gptq_w4_mixed"  # the preset; nothing overridden
    assert run.data.params["engine.port"] == "30000" and run.data.params["quant.name"] == "gptq_w4_mixed"
    assert run.data.metrics["bench.S1_duration_s"] == 2.0 and run.data.metrics["accuracy.ori_accuracy"] == 81.5
    assert run.data.metrics["score.final"] == 99.5 and "accuracy.note" not in run.data.metrics
    assert run.data.tags["dvc.experiment"] == "brave-exp" and run.data.tags["soarlab.speed_set_sha"] == "abc"
    artifacts = {a.path for a in client.list_artifacts(run_id, "reports/bench")}
    assert {"reports/bench/S1.jsonl", "reports/bench/metrics.json"} <= artifacts
    assert (root / "mlartifacts").is_dir()


def test_recorded_durations_filter_by_model_and_speed_set(project):
    root, cfg = project
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


def test_run_name_shows_the_flag_two_sweep_trials_differ_in():
    """A group's keys are named against the group's own preset: trials of engine=sglang that differ in one
    serving flag get different names (seen on the H200 sweep, where both were 'none · engine=sglang')."""
    from soarlab.tracking.params import run_name, run_params

    def name(*overrides):
        cfg = compose(list(overrides))
        return run_name(cfg, run_params(cfg))

    assert name() == "gptq_w4_mixed"
    assert name("quant=none", "engine=sglang") == "none · engine=sglang"
    assert name("quant=none", "engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3") == \
        "none · engine=sglang, engine.server_args.kv-cache-dtype=fp8_e4m3"
    assert name("engine=external", "engine.url=http://gpu-box:30000") == "gptq_w4_mixed · engine=external"  # incidental
