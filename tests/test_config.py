"""params.yaml (what `dvc repro` runs) must equal the composition of conf/ defaults, and every
param a dvc.yaml stage names must exist, so config and pipeline never drift apart."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from soarlab.config import compose, flatten
from soarlab.errors import SoarError

from conftest import ROOT


def test_params_yaml_equals_composed_defaults():
    committed = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert committed == OmegaConf.to_container(compose(root=ROOT), resolve=True), (
        "params.yaml is stale: regenerate it with `soarlab params`"
    )


def _stage_param_keys():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return [(name, key) for name, stage in stages.items() for key in stage.get("params", [])]


@pytest.mark.parametrize("stage,key", _stage_param_keys())
def test_every_stage_param_exists_in_params_yaml(stage, key):
    params = OmegaConf.create(yaml.safe_load((ROOT / "params.yaml").read_text()))
    assert OmegaConf.select(params, key, throw_on_missing=False) is not None or key in flatten(params), (stage, key)


def test_serving_flags_do_not_reach_fetch_or_quantize():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name in ("fetch-model", "fetch-data", "quantize"):
        assert not [k for k in stages[name].get("params", []) if k.startswith("engine")], name
    for name in ("evaluate", "package"):
        assert "engine" in stages[name]["params"], name


def test_override_changes_only_its_key():
    base, changed = compose(root=ROOT), compose(["engine.port=31000", "quant=none"], root=ROOT)
    assert changed.engine.port == 31000 and changed.quant.name == "none"
    assert changed.model == base.model


@pytest.mark.parametrize("override", ["engine.prot=31000", "quant=gptq_w5", "nosuchgroup=x"])
def test_misspelled_override_is_a_one_line_error(override):
    with pytest.raises(SoarError) as err:
        compose([override], root=ROOT)
    assert "\n" not in str(err.value) and "Fix:" in str(err.value)


def test_cli_reports_bad_override_in_one_line_and_exits_nonzero():
    proc = subprocess.run(
        [sys.executable, "-m", "soarlab.cli", "params", "engine.prot=1", "--output", "/dev/null"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "engine.prot" in proc.stderr and "Fix:" in proc.stderr
