"""Guard of issue 39: the flag on runs whose answers grew longer than the unquantized run's
(soarlab.decide.length_flag), in the leaderboard, `gate` and `compare`, on a real MLflow sqlite store.
The lengths themselves are measured in tests/accuracy/test_answer_lengths.py."""

from __future__ import annotations

import argparse
import json

from soarlab.config import compose

from support import ROOT


def _store(tmp_path) -> tuple[object, str]:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    return client, uri


def _log_run(client, experiment_id: str, quant: str, serve: str | None, p95: float, at_cap: int, seconds: float) -> str:
    run = client.create_run(experiment_id, tags={"soarlab.model": "tiny", "soarlab.speed_set_sha": "s"})
    run_id = run.info.run_id
    params = {"quant.name": quant, "quant.method": "none" if quant in ("none", "fp8") else "rtn",
              "quant.serve_quantization": json.dumps(serve), "eval.max_tokens": "48", "model.baseline_accuracy": "70.63"}
    for key, value in params.items():
        client.log_param(run_id, key, value)
    metrics = {"accuracy.length_p95": p95, "accuracy.length_at_cap": at_cap, "accuracy.ori_accuracy": 73.0,
               "accuracy.ori_ci_low": 72.0, "accuracy.ori_ci_high": 74.0, "accuracy.C": 1.0}
    for level in ("S1", "S8", "Smax"):
        metrics.update({f"bench.{level}_valid": 1.0, f"bench.{level}_duration_s": seconds})
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    client.set_terminated(run_id)
    return run_id


def test_length_flag_fires_at_the_margin_and_gate_refuses(tmp_path, monkeypatch, capsys):
    from soarlab.decide import gate, length_flag
    from soarlab.prediction.calibration import fit
    from soarlab.decide.leaderboard import rows
    from soarlab.tracking.runs import load_runs

    client, uri = _store(tmp_path)
    experiment_id = client.create_experiment("soarlab")
    cfg = compose([f"tracking.uri={uri}"], root=ROOT)
    margins = cfg.decide.lengths
    ref_p95 = 40.0
    edge = ref_p95 * (1 + margins.p95_growth_pct / 100)
    reference = _log_run(client, experiment_id, "none", None, ref_p95, 1, 10.0)
    at_edge = _log_run(client, experiment_id, "rtn_w4", None, edge, 1 + margins.at_cap_growth, 9.0)
    longer = _log_run(client, experiment_id, "rtn_w4", None, edge + 1, 1, 5.0)
    more_capped = _log_run(client, experiment_id, "fp8", "fp8", ref_p95, 2 + margins.at_cap_growth, 9.0)
    _, _, runs = load_runs(cfg, with_repeats=False)
    by_id = {r.run_id: r for r in runs}
    assert length_flag.reference_run(by_id[longer], runs).run_id == reference
    assert length_flag.flag(by_id[reference], runs, margins) is None  # the reference itself
    assert length_flag.flag(by_id[at_edge], runs, margins) is None
    assert "p95" in length_flag.flag(by_id[longer], runs, margins) and reference[:8] in length_flag.flag(by_id[longer], runs, margins)
    assert "at the cap" in length_flag.flag(by_id[more_capped], runs, margins)
    table = {row["run_id"]: row for row in rows(runs, fit(runs, cfg), cfg)}
    assert table[longer]["long_answers"] and not table[at_edge]["long_answers"]

    monkeypatch.chdir(ROOT)
    args = argparse.Namespace(target=longer, against=at_edge, min_gain=None, experiment=None,
                              overrides=[f"tracking.uri={uri}"], allow_long_answers=False)
    from soarlab.commands.decide import compare_cli, gate_cli

    refused = gate_cli(args)
    out = capsys.readouterr().out
    assert refused == gate.EXIT_FAIL and "refused (--allow-long-answers to accept)" in out
    args.allow_long_answers = True
    gate_cli(args)
    assert "allowed by --allow-long-answers" in capsys.readouterr().out

    compare_cli(argparse.Namespace(a=at_edge, b=longer, experiment=None, rerun=None, json=True,
                                   overrides=[f"tracking.uri={uri}"]))
    flagged = json.loads(capsys.readouterr().out)["lengths"]
    assert flagged["A"] == {"p95": edge, "at_cap": 1 + margins.at_cap_growth, "flag": None}
    assert flagged["B"]["p95"] == edge + 1 and "p95" in flagged["B"]["flag"] and reference[:8] in flagged["B"]["flag"]
