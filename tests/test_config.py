"""params.yaml (what `dvc repro` runs) must equal the composition of conf/ defaults, and every
param a dvc.yaml stage names must exist, so config and pipeline never drift apart."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from soarlab.config import compose, flatten, hydra_config, load_params, plain
from soarlab.errors import SoarError

from support import ROOT


def test_params_yaml_equals_composed_defaults():
    committed = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert committed == OmegaConf.to_container(hydra_config(root=ROOT), resolve=True), (
        "params.yaml is stale: regenerate it with `soarlab params`"
    )
    assert load_params(ROOT / "params.yaml") == compose(root=ROOT)  # what a stage reads is what the CLI reads


def _stage_param_keys():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return [(name, key) for name, stage in stages.items() for key in stage.get("params", [])
            if isinstance(key, str)]  # not `params.yaml:` (every key of the file)


@pytest.mark.parametrize("stage,key", _stage_param_keys())
def test_every_stage_param_exists_in_params_yaml(stage, key):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert key in flatten(params) or OmegaConf.select(OmegaConf.create(params), key) is not None, (stage, key)


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


# --- the schema (soarlab.schema): types, ranges and unknown keys fail at compose time, in one line ---

@pytest.mark.parametrize("override,key,words", [
    ("engine.port=notaport", "engine.port", "valid integer"),
    ("engine.port=99999", "engine.port", "65535"),
    ("engine.port=-1", "engine.port", "greater than or equal to 0"),
    ("engine.startup_timeout_s=0", "engine.startup_timeout_s", "greater than 0"),
    ("bench.repeats=0", "bench.repeats", "greater than 0"),
    ("bench.dataset.num_requests=ten", "bench.dataset.num_requests", "valid integer"),
    ("quant.bits=5", "quant.bits", "4 or 8"),
    ("quant.method=awq", "quant.method", "'gptq', 'rtn' or 'none'"),
    ("eval.bootstrap.confidence=1.5", "eval.bootstrap.confidence", "less than 1"),
    ("+engine.prot=31000", "engine.prot", "unknown key"),
    ("+quant.calibration.samples=3", "quant.calibration.samples", "unknown key"),
    ("engine=sglang", None, None),  # valid: each engine has its own keys
])
def test_schema_rejects_bad_values_naming_the_key(override, key, words):
    if key is None:
        assert compose([override], root=ROOT).engine.name == "sglang"
        return
    with pytest.raises(SoarError) as err:
        compose([override], root=ROOT)
    message = str(err.value)
    assert "\n" not in message and f"config key {key} " in message and words in message, message


@pytest.mark.parametrize("group", ["model", "quant", "engine", "bench", "eval", "score", "package", "tracking"])
def test_every_preset_of_every_group_passes_the_schema(group):
    for option in sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")):
        assert getattr(compose([f"{group}={option}"], root=ROOT), group) is not None, option


def test_presets_are_deltas_over_their_base():
    w4, w8 = (plain(compose([f"quant={p}"], root=ROOT).quant) for p in ("gptq_w4", "gptq_w8"))
    assert {k for k in w4 if w4[k] != w8[k]} == {"name", "bits"}
    assert compose(root=ROOT).quant.name == "gptq_w4_mixed"  # the default: the one that keeps C (README)
    tiny, soar = (compose([f"eval={p}"], root=ROOT).eval for p in ("tiny", "soar"))
    assert tiny.dataset.source == "embedded" and tiny.bootstrap.seed == soar.bootstrap.seed


def test_a_stage_refuses_a_bad_params_yaml_before_it_starts(tmp_path):
    """`dvc exp run -S engine.port=notaport` writes params.yaml without our compose: the stage checks it."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["engine"]["port"] = "notaport"
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(params))
    proc = subprocess.run(
        [sys.executable, "-m", "soarlab.cli", "stage", "fetch-model", "--params", str(bad)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "config key engine.port" in proc.stderr and "'notaport'" in proc.stderr


@pytest.mark.slow
def test_dvc_exp_run_with_a_bad_value_stops_before_any_stage_work(tmp_path):
    """Real DVC: `dvc exp run -S` composes params.yaml itself; the first stage refuses it in one line."""
    from support import make_project

    dest, env = make_project(tmp_path / "project")
    proc = subprocess.run(["dvc", "exp", "run", "-S", "engine.port=99999"], cwd=dest, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "soarlab: error: config key engine.port in params.yaml: Input should be less than or equal to 65535" in out
    assert not (dest / "models" / "base").exists() and "training tiny model" not in out
