"""check-checkpoint refuses deliberately broken checkpoints: one test per RULES.md 7 pitfall."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from soarlab.config import compose
from soarlab.quant.check import check_checkpoint
from soarlab.quant.packing import PACK_BITS, unpack_cols

# Each test here quantizes the tiny model with real GPTQModel (or takes a module fixture that does).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def good(tiny_model_dir, tmp_path_factory):
    """One real GPTQ mixed-precision checkpoint of the tiny model, shared by the module."""
    from soarlab.quant.quantize import quantize_checkpoint

    out = tmp_path_factory.mktemp("good") / "model"
    quantize_checkpoint(tiny_model_dir, out, compose(["quant=gptq_w4_mixed"]).quant)
    return out


@pytest.fixture
def ckpt(good, tmp_path):
    """A private copy to break."""
    return shutil.copytree(good, tmp_path / "ckpt")


def edit_config(d, fn):
    path = d / "config.json"
    config = json.loads(path.read_text())
    fn(config)
    path.write_text(json.dumps(config))


def edit_tensors(d, fn):
    path = d / "model.safetensors"
    tensors = load_file(str(path))
    fn(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


EXCLUDE = list(compose().quant.exclude)


def assert_problem(d, *words):
    problems = check_checkpoint(d, EXCLUDE)
    assert any(all(w in p for w in words) for p in problems), problems


def test_good_checkpoint_passes(good):
    assert check_checkpoint(good, EXCLUDE) == []


def test_asymmetric_quantization(ckpt):
    edit_config(ckpt, lambda c: c["quantization_config"].update(sym=False))
    assert_problem(ckpt, "sym", "symmetric")


def test_asymmetric_dynamic_override(ckpt):
    def f(c):
        dyn = c["quantization_config"]["dynamic"]
        key = next(k for k in dyn if k.startswith("+:"))
        dyn[key]["sym"] = False
    edit_config(ckpt, f)
    assert_problem(ckpt, "sym=false")


def test_dynamic_rule_that_misses_the_fused_name(ckpt):
    """GPTQModel's own naming (q_proj|k_proj|v_proj): SGLang looks rules up under the fused qkv_proj, finds
    none, and builds the layer at the base 4 bits while the checkpoint holds 8-bit q/k/v."""
    def f(c):
        dyn = c["quantization_config"]["dynamic"]
        assert any("qkv_proj" in k for k in dyn)
        c["quantization_config"]["dynamic"] = {k.replace(r"|self_attn\.qkv_proj", ""): v for k, v in dyn.items()}
    edit_config(ckpt, f)
    assert_problem(ckpt, "self_attn.qkv_proj", "stored 8-bit", "builds it 4-bit")


def pack_cols(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of unpack_cols: writes deliberately broken zero points."""
    per = PACK_BITS // bits
    v = values.to(torch.int64).reshape(values.shape[0], -1, per)
    out = torch.zeros(v.shape[:2], dtype=torch.int64)
    for j in range(per):
        out |= v[:, :, j] << (bits * j)
    out &= 0xFFFFFFFF
    return torch.where(out >= (1 << 31), out - (1 << 32), out).to(torch.int32)


def test_zero_points_not_what_marlin_expects(ckpt):
    name = "model.layers.1.mlp.up_proj.qzeros"

    def f(t):  # v2-style zeros (8) written into a v1 checkpoint: the reported GPTQModel bug
        t[name] = pack_cols(unpack_cols(t[name], 4) + 1, 4)
    edit_tensors(ckpt, f)
    assert_problem(ckpt, "up_proj.qzeros", "expected all 7")


def test_zero_points_of_8bit_modules(ckpt):
    name = "model.layers.0.self_attn.q_proj.qzeros"
    edit_tensors(ckpt, lambda t: t.__setitem__(name, pack_cols(torch.zeros_like(unpack_cols(t[name], 8)), 8)))
    assert_problem(ckpt, "q_proj.qzeros", "expected all 127")


def test_checkpoint_format_v2(ckpt):
    edit_config(ckpt, lambda c: c["quantization_config"].update(checkpoint_format="gptq_v2"))
    assert_problem(ckpt, "checkpoint_format", "v1")


def test_float16_config_dtype(ckpt):
    edit_config(ckpt, lambda c: c.update(dtype="float16"))
    assert_problem(ckpt, "dtype", "bfloat16")


def test_float16_tensor(ckpt):
    edit_tensors(ckpt, lambda t: t.__setitem__("model.norm.weight", t["model.norm.weight"].half()))
    assert_problem(ckpt, "model.norm.weight", "BF16")


def test_auto_map_autoconfig_present(ckpt):
    edit_config(ckpt, lambda c: c["auto_map"].update(AutoConfig="configuration_minicpm_sala.MiniCPMSALAConfig"))
    assert_problem(ckpt, "AutoConfig")


@pytest.mark.parametrize("module", ["model.layers.0.self_attn.o_gate", "model.layers.1.self_attn.z_proj"])
def test_excluded_module_quantized(ckpt, module):
    donor = "model.layers.1.self_attn.q_proj"  # 4-bit, same [128 -> 128] shape

    def f(t):
        del t[f"{module}.weight"]
        for s in ("qweight", "qzeros", "scales", "g_idx"):
            t[f"{module}.{s}"] = t[f"{donor}.{s}"].clone()
    edit_tensors(ckpt, f)
    assert_problem(ckpt, module, "must stay unquantized")


def test_lm_head_quantized(ckpt):
    def f(t):
        del t["lm_head.weight"]
        t["lm_head.qweight"] = torch.zeros(16, 2048, dtype=torch.int32)
    edit_tensors(ckpt, f)
    assert_problem(ckpt, "lm_head", "must stay unquantized")


def test_unquantized_module_not_excluded_in_config(ckpt):
    edit_config(ckpt, lambda c: c["quantization_config"].update(
        dynamic={k: v for k, v in c["quantization_config"]["dynamic"].items() if not k.startswith("-:")}))
    assert_problem(ckpt, "o_gate", "SGLang would expect a qweight")


def test_wrong_bits_recorded(ckpt):
    # The 8-bit overrides dropped: SGLang would read the 8-bit q/k/v as 4-bit.
    edit_config(ckpt, lambda c: c["quantization_config"].update(
        dynamic={k: v for k, v in c["quantization_config"]["dynamic"].items() if not k.startswith("+:")}))
    assert_problem(ckpt, "model.layers.0.self_attn.q_proj", "wrong bits")


def test_scales_shape_inconsistent_with_group_size(ckpt):
    edit_config(ckpt, lambda c: c["quantization_config"].update(group_size=64))
    assert_problem(ckpt, ".scales shape", "group size 64")


def test_truncated_qzeros(ckpt):
    name = "model.layers.2.mlp.down_proj.qzeros"
    edit_tensors(ckpt, lambda t: t.__setitem__(name, t[name][:1].clone()))
    assert_problem(ckpt, "down_proj.qzeros shape")


def test_nan_in_scales(ckpt):
    name = "model.layers.2.mlp.gate_proj.scales"

    def f(t):
        t[name] = t[name].clone()
        t[name][0, 0] = float("nan")
    edit_tensors(ckpt, f)
    assert_problem(ckpt, "gate_proj.scales", "NaN")


def test_g_idx_not_trivial_without_desc_act(ckpt):
    name = "model.layers.3.mlp.down_proj.g_idx"
    edit_tensors(ckpt, lambda t: t.__setitem__(name, t[name].flip(0).contiguous()))
    assert_problem(ckpt, "down_proj.g_idx")


def test_missing_tokenizer_and_remote_code(ckpt):
    (ckpt / "tokenizer.json").unlink()
    (ckpt / "modeling_minicpm_sala.py").unlink()
    assert_problem(ckpt, "tokenizer")
    assert_problem(ckpt, "modeling_minicpm_sala.py")


def test_no_weights(ckpt):
    (ckpt / "model.safetensors").unlink()
    assert_problem(ckpt, "no *.safetensors")


def test_cli_lists_each_problem_and_exits_nonzero(ckpt, capsys):
    from soarlab.cli import main

    edit_config(ckpt, lambda c: (c["quantization_config"].update(sym=False), c.update(dtype="float16")))
    assert main(["check-checkpoint", str(ckpt)]) == 1
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("problem: ")]
    assert len(lines) >= 2 and any("sym" in l for l in lines) and any("dtype" in l for l in lines)


def test_cli_missing_dir_exits_2(tmp_path):
    from soarlab.cli import main

    assert main(["check-checkpoint", str(tmp_path / "nope")]) == 2
