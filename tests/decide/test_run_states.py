"""Run states that tell the truth: `compare` and `gate` given a FAILED or KILLED run say so, not that it
is missing. A real MLflow store holding such runs, as a failed sweep trial or an interrupted run leaves them."""

from __future__ import annotations

import os

import mlflow
import pytest

from support import ROOT, soarlab_in


@pytest.mark.parametrize("status", ["FAILED", "KILLED"])
def test_compare_and_gate_name_a_failed_or_killed_run(tmp_path, status):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    run = client.create_run(client.create_experiment("soarlab"), run_name="trial", tags={"dvc.experiment": "sweep-9f8e7d"})
    client.set_terminated(run.info.run_id, status)
    here = (ROOT, dict(os.environ))
    for ref in (run.info.run_id, run.info.run_id[:8], "sweep-9f8e7d"):
        for args in (["compare", ref, "best"], ["gate", ref]):
            done = soarlab_in(here, [*args, f"tracking.uri={uri}"], ok=(2,))
            line = done.stderr.strip().splitlines()[-1]
            assert line.startswith(f"soarlab: error: run {ref!r} is {status}: it has no result to compare. Fix: "), line


def test_the_leaderboard_plot_goes_where_the_pipeline_artifacts_go(tmp_path, monkeypatch):
    from soarlab.decide.leaderboard import log_plot

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact folder (./mlruns) would be made here
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.create_experiment("soarlab", artifact_location=(tmp_path / "mlartifacts").as_uri())
    plot = tmp_path / "pareto.png"
    plot.write_bytes(b"png")
    run_id = log_plot(client, "soarlab", None, plot)
    assert (tmp_path / "mlartifacts" / run_id / "artifacts" / "leaderboard" / "pareto.png").read_bytes() == b"png"
    assert not (tmp_path / "mlruns").exists()
