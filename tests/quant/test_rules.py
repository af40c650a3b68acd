"""Quantization rules (soarlab.quant.rules) planned on the tiny model's real module inventory: no
quantization runs here (tests/quant/test_quantize.py quantizes)."""

from __future__ import annotations

import pytest

from soarlab.errors import SoarError

from support import qcfg


def _plan(tiny_model_dir, **changes):
    from soarlab.quant.rules import build_plan, inventory

    return build_plan(inventory(tiny_model_dir), qcfg(**changes))


def test_rule_matching_no_module_warns_with_its_name(tiny_model_dir):
    with pytest.warns(UserWarning, match="ghost"):
        plan = _plan(tiny_model_dir, rules=[{"name": "ghost", "match": r".*\.nothing_here", "bits": 8}])
    assert any("ghost" in w for w in plan.warnings)


def test_rule_quantizing_an_excluded_module_is_an_error(tiny_model_dir):
    with pytest.raises(SoarError, match="o_gate"):
        _plan(tiny_model_dir, rules=[{"name": "greedy", "match": r".*\.self_attn\..*", "bits": 8}])


def test_rule_with_override_exclude_may_quantize_an_excluded_module(tiny_model_dir):
    plan = _plan(tiny_model_dir, rules=[{"name": "gate8", "match": r".*\.o_gate", "bits": 8, "override_exclude": True}])
    assert plan.bits["model.layers.0.self_attn.o_gate"] == 8


def test_rule_splitting_a_fused_group_is_an_error(tiny_model_dir):
    with pytest.raises(SoarError, match="fuses"):
        _plan(tiny_model_dir, rules=[{"name": "q_only", "match": r".*\.q_proj", "bits": 8}])


def test_keep_rule_and_mixer_selection(tiny_model_dir):
    plan = _plan(tiny_model_dir, rules=[{"name": "keep_lightning_mlp", "mixer": "lightning-attn",
                                         "match": r".*\.mlp\..*", "bits": "keep"}])
    assert plan.bits["model.layers.1.mlp.up_proj"] is None
    assert plan.bits["model.layers.0.mlp.up_proj"] == 4
    assert any(k.startswith("-:") and "gate_up_proj" in k for k in plan.dynamic)


def test_group_size_not_dividing_inputs_is_an_error(tiny_model_dir):
    with pytest.raises(SoarError, match="group_size"):
        _plan(tiny_model_dir, group_size=96)
