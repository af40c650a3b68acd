"""RULES.md 1: speed scores, the C table and the final score, from config."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from soarlab.config import compose
from soarlab.errors import SoarError
from soarlab.final_score import coefficient, final_score, normalized_accuracy, parse_levels

from support import ROOT


@pytest.fixture(scope="module")
def score_cfg():
    return compose(root=ROOT).score


@pytest.mark.parametrize("ori,expected_c", [(78.71, 0.96), (78.07, 0.92), (76.64, 0.0), (80.0, 1.0), (95.0, 1.0)])
def test_reported_accuracy_pairs_give_the_reported_c(score_cfg, ori, expected_c):
    norm = normalized_accuracy(ori, 80.0, score_cfg.accuracy_cap)
    assert coefficient(norm, score_cfg.c_table, score_cfg.c_floor) == expected_c


@pytest.mark.parametrize("norm,expected_c", [(99.0, 0.96), (99.01, 1.0), (98.0, 0.92), (97.0, 0.0), (97.01, 0.92)])
def test_band_edges_are_exclusive_below(score_cfg, norm, expected_c):
    assert coefficient(norm, score_cfg.c_table, score_cfg.c_floor) == expected_c


def test_final_score_weights_levels_and_applies_c(score_cfg):
    result = final_score({"S1": 200, "S8": 100, "Smax": 50}, {"S1": 100, "S8": 100, "Smax": 100}, 78.71, 80.0, score_cfg)
    # S1 = 50, S8 = 100, Smax = 200 -> 0.4*50 + 0.3*100 + 0.3*200 = 110; C = 0.96
    assert result["S1"] == 50 and result["S8"] == 100 and result["Smax"] == 200
    assert result["performance"] == 110 and result["C"] == 0.96 and result["final"] == 105.6
    assert result["normalized_accuracy"] == 98.39


def test_accuracy_above_baseline_is_capped(score_cfg):
    assert normalized_accuracy(90.0, 80.0, score_cfg.accuracy_cap) == 100


@pytest.mark.parametrize("text", ["S1=1,S8=2", "S1=1,S8=2,Smax=x", "S1=1,S8=2,Smax=3,S4=1", "garbage"])
def test_bad_levels_are_refused(text):
    with pytest.raises(SoarError):
        parse_levels(text)


def test_score_cli_prints_one_json_object():
    proc = subprocess.run(
        [sys.executable, "-m", "soarlab.cli", "score", "--durations", "S1=500,S8=700,Smax=1400",
         "--best", "S1=400,S8=600,Smax=1200", "--ori-accuracy", "78.71"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    result = json.loads(proc.stdout)
    assert set(result) >= {"S1", "S8", "Smax", "performance", "normalized_accuracy", "C", "final"}
    assert result["S1"] == 80.0 and result["C"] == 0.96
    assert result["final"] == round(result["performance"] * 0.96, 2)


def test_score_cli_rejects_zero_duration():
    proc = subprocess.run(
        [sys.executable, "-m", "soarlab.cli", "score", "--durations", "S1=0,S8=1,Smax=1",
         "--best", "S1=1,S8=1,Smax=1", "--ori-accuracy", "80"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 2 and "S1" in proc.stderr
