"""`soarlab compare A B --rerun 3` of two identical configurations (compare_rerun_lab says how the runs
drift): within noise, by the reruns' spread."""

from __future__ import annotations

import json

import pytest

from decide.compare_rerun_lab import DELAY_S, assert_interleaved_fresh_runs_logged_and_tagged, compare_lab

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return compare_lab(tmp_path_factory.mktemp("rerun-same"), DELAY_S, [])


def test_identical_configurations_are_within_noise(lab):
    same = json.loads(lab["compare"].stdout)
    assert lab["compare"].returncode == 1, lab["compare"].stdout
    assert [d["verdict"] for d in same["levels"]] == ["within noise"] * 3
    assert all(d["noise"] == ["reruns", "reruns"] and d["runs"] == [3, 3] for d in same["levels"])


def test_reruns_are_interleaved_fresh_runs_logged_and_tagged(lab):
    assert_interleaved_fresh_runs_logged_and_tagged(lab, json.loads(lab["compare"].stdout))
