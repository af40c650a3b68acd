"""Guards of issue 39 for FP8: the refused SGLang flag combinations (soarlab.known_bad, cited from RULES.md),
the CPU's FP8 rounding of the shipped tiny model's weights (soarlab.quant.fp8) and the flag the CPU launcher
takes. Nothing here needs a GPU; SGLang's FP8 itself cannot run here, and is not imported."""

from __future__ import annotations

from pathlib import Path

import pytest

from soarlab.config import compose
from soarlab.errors import SoarError

from support import ROOT


@pytest.mark.parametrize("overrides, refused", [
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3"], "RULES.md 6"),
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e5m2", "engine.server_args.attention-backend=null"], "(unset)"),
    (["+package.sglang.server_args.kv-cache-dtype=fp8_e4m3"], "package.sglang.server_args"),  # the submission's flags
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp4_e2m1"], "RULES.md 7"),
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3", "+engine.server_args.force-dense-minicpm=true"], None),
    (["engine=sglang", "+engine.server_args.kv-cache-dtype=fp8_e4m3", "engine.server_args.attention-backend=flashinfer"], None),
    (["quant=fp8", "engine=sglang", "+engine.server_args.kv-cache-dtype=auto"], None),
])
def test_known_bad_fp8_combinations_are_refused_citing_rules(overrides, refused):
    if refused is None:
        compose(overrides, root=ROOT)
        return
    with pytest.raises(SoarError) as info:
        compose(overrides, root=ROOT)
    assert refused in str(info.value) and "RULES.md" in str(info.value)


def test_a_second_hand_fact_warns_naming_its_source(capsys):
    rule = ('package.sglang.known_bad=[{when: {kv-cache-dtype: [fp8_e5m2]}, unless: {}, why: slow, '
            'source: "SGLang PR 1234", secondhand: true}]')
    compose(["engine=sglang", rule, "+engine.server_args.kv-cache-dtype=fp8_e5m2"], root=ROOT)
    assert "SGLang PR 1234), second-hand" in capsys.readouterr().err


def test_fp8_rounding_of_the_shipped_tiny_model(tiny_model_dir):
    """Every linear weight but lm_head moves by at most e4m3's rounding step of its row; rounding again moves it
    by no more than bf16's own rounding."""
    import torch

    from soarlab.quant import fp8
    from soarlab.quant.hf_compat import load_causal_lm

    model = load_causal_lm(tiny_model_dir)
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    rounded = fp8.round_linear_weights(model)
    after = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert rounded == len(before) - 1 and torch.equal(before["lm_head"], after["lm_head"])
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert changed and "lm_head" not in changed
    for name in changed:
        w0, w1 = before[name].float(), after[name].float()
        row_max = w0.abs().amax(dim=1, keepdim=True)
        assert ((w1 - w0).abs() <= row_max * 2.0 ** -4 + 1e-6).all(), name  # e4m3: 3 mantissa bits
    assert fp8.round_linear_weights(model) == rounded
    again = {n: m.weight for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert all(torch.allclose(again[n].float(), after[n].float(), rtol=2 ** -7, atol=0) for n in changed)


def test_the_cpu_launcher_takes_sglangs_fp8_flag_only():
    from soarlab.engines.transformers_engine import build_command
    from soarlab.quant import fp8

    argv = ["serve", "m", "--quantization", "fp8", "--port", "1"]
    assert fp8.pop_flag(argv) and argv == ["serve", "m", "--port", "1"]
    argv = ["serve", "m", "--quantization", "bnb-4bit"]
    assert not fp8.pop_flag(argv) and "bnb-4bit" in argv  # transformers' own quantization stays
    command = build_command(compose(["quant=fp8"], root=ROOT), Path("m"), "127.0.0.1", 1)
    assert command[command.index("--quantization") + 1] == "fp8"
    assert "--quantization" not in build_command(compose(["quant=none"], root=ROOT), Path("m"), "127.0.0.1", 1)
