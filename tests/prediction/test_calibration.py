"""Calibration on numbers checkable by hand: RULES.md 3's published case (local 110/40/35 s, official
596/1066/2746 s) and a run predicted from it. The end-to-end checks on real MLflow runs are in tests/decide/test_decide.py."""

from __future__ import annotations

import math

import pytest

from soarlab.config import compose
from soarlab.prediction.calibration import fit, predict
from soarlab.tracking.runs import RunRecord


def _run(run_id: str, durations: dict, ori: float, official: dict | None = None, repeats: dict | None = None) -> RunRecord:
    metrics = {f"bench.{L}_duration_s": d for L, d in durations.items()} | {f"bench.{L}_valid": 1.0 for L in durations}
    metrics |= {"accuracy.ori_accuracy": ori, "accuracy.ori_ci_low": ori - 1, "accuracy.ori_ci_high": ori + 1}
    tags = {"soarlab.model": "minicpm_sala", "soarlab.speed_set_sha": "abc"}
    if official:
        metrics |= {f"official.{k}": v for k, v in official.items()}
        tags["soarlab.submitted"] = "true"
    # Each run its own config: runs of one config would form a group of the noise record.
    config = {"model.baseline_accuracy": "80", "quant.name": run_id}
    return RunRecord(run_id, run_id, 0, tags, config, metrics, repeats or {})


@pytest.fixture
def cfg():
    return compose(["model=minicpm_sala"])


def test_the_published_inverted_case_warns_for_s8_and_smax(cfg):
    team = _run("team", {"S1": 110, "S8": 40, "Smax": 35}, 81.0,
                {"S1_duration_s": 596, "S8_duration_s": 1066, "Smax_duration_s": 2746, "ori_accuracy": 80.0})
    calibration = fit([team], cfg)
    assert [round(calibration.levels[L].ratio, 4) for L in ("S1", "S8", "Smax")] == [5.4182, 26.65, 78.4571]
    s8, smax = calibration.warnings
    # S8: 1066/596 = 1.79x S1 officially, 40/110 = 0.36x locally: 4.9x off, and inverted (below S1 locally, above officially).
    assert s8.startswith("S8 takes 1.79x the S1 duration officially but 0.36x locally (4.9x off, inverted")
    assert smax.startswith("Smax takes 4.61x the S1 duration officially but 0.32x locally (14.5x off, inverted")
    assert "bench.dataset.profile" in smax
    assert calibration.offset == -1.0 and calibration.offset_half == 1.0  # 80 - 81; half of the bootstrap [80, 82]


def test_a_run_is_predicted_with_the_submitted_ratio(cfg):
    team = _run("team", {"S1": 100, "S8": 200, "Smax": 400}, 81.0,
                {"S1_duration_s": 300, "S8_duration_s": 600, "Smax_duration_s": 1200, "ori_accuracy": 82.0})
    cfg.decide.calibration.official_best = {"S1": 150.0, "S8": 300.0, "Smax": 600.0}
    candidate = _run("candidate", {"S1": 50, "S8": 150, "Smax": 400}, 80.0)
    calibration = fit([team, candidate], cfg)
    assert calibration.warnings == []  # every level 3x: ratios agree
    prediction = predict(calibration, candidate, cfg.score)
    assert prediction.durations["S1"][0] == pytest.approx(150) and prediction.durations["Smax"][0] == pytest.approx(1200)
    # No repeats anywhere: the duration intervals are points. ori 80 + 1 = 81 +- hypot(1, 1).
    assert prediction.durations["S8"] == pytest.approx((450, 450, 450))
    assert prediction.ori == pytest.approx((81.0, 81 - math.sqrt(2), 81 + math.sqrt(2)))
    # S1 = 100*150/150, S8 = 100*300/450, Smax = 100*600/1200; norm 81/80 capped at 100 -> C 1.
    assert prediction.speeds["S8"][0] == pytest.approx(66.67, abs=0.01)
    assert prediction.final[0] == pytest.approx(0.4 * 100 + 0.3 * 66.67 + 0.3 * 50, abs=0.01)
    # The low end of ori (79.59) normalizes to 99.48: still above 99, so C is settled at 1.
    assert prediction.C == (1.0, 1.0, 1.0) and prediction.c_settled


def test_repeats_widen_the_predicted_duration(cfg):
    team = _run("team", {"S1": 10, "S8": 10, "Smax": 10}, 80.0,
                {"S1_duration_s": 20, "S8_duration_s": 20, "Smax_duration_s": 20, "ori_accuracy": 80.0},
                repeats={"S1": [9.0, 10.0, 11.0]})
    calibration = fit([team], cfg)
    s1 = calibration.levels["S1"]
    # log-ratio standard error = sd / (mean sqrt(n)) = 1 / (10 sqrt 3); t(0.975, 2 df) = 4.3027
    assert s1.log_se == pytest.approx(1 / (10 * math.sqrt(3))) and s1.df == 2
    assert s1.interval[1] == pytest.approx(2.0 * math.exp(4.302653 / (10 * math.sqrt(3))), rel=1e-6)
    assert calibration.levels["S8"].interval == (2.0, 2.0)
